"""bisect a command: a bisect's test may be none, the whole command timed

Revision ID: 0033_bisect_command
Revises: 0032_predicted_cost
Create Date: 2026-12-07

A bisect times one test of a pytest command, or, with no test, the whole command's wall
time: a program that is no pytest suite (services/jobs/bisect_checkouts.py). Its row's
test_id is then NULL. Existing rows all name a test: nothing to backfill.
"""

import sqlalchemy as sa
from alembic import op

revision = "0033_bisect_command"
down_revision = "0032_predicted_cost"
branch_labels = None
depends_on = None


# The small bisects table in batch mode: SQLite changes a column's nullability only by copying it.
def upgrade() -> None:
    with op.batch_alter_table("bisects") as batch:
        batch.alter_column("test_id", existing_type=sa.Text(), nullable=True)


def downgrade() -> None:
    op.execute("DELETE FROM bisects WHERE test_id IS NULL")
    with op.batch_alter_table("bisects") as batch:
        batch.alter_column("test_id", existing_type=sa.Text(), nullable=False)
