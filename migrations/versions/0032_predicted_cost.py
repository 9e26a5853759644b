"""predicted cost: what a job will cost, before and as it runs

Revision ID: 0032_predicted_cost
Revises: 0031_pushed_range
Create Date: 2026-12-07

A job's predicted wall time, created to finished (services/jobs/forecast.py): the latest
prediction and when it was made, updated after each run, and the first one made from a
run of the suite, kept so that a finished job shows it beside the time it took
(docs/explanations/cost-model.md). Nullable columns: jobs stored before them have no
prediction.
"""

import sqlalchemy as sa
from alembic import op

revision = "0032_predicted_cost"
down_revision = "0031_pushed_range"
branch_labels = None
depends_on = None


# Not in batch mode (as 0028): SQLite adds and drops a nullable column in place.


def upgrade() -> None:
    op.add_column("jobs", sa.Column("predicted_s", sa.Float(), nullable=True))
    op.add_column("jobs", sa.Column("predicted_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("jobs", sa.Column("first_predicted_s", sa.Float(), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "first_predicted_s")
    op.drop_column("jobs", "predicted_at")
    op.drop_column("jobs", "predicted_s")
