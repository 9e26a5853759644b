"""jobs.screen_seed: the seed of the screen's run order, so a job can be replayed

Revision ID: 0008_stats_screen_seed
Revises: 0007_web
"""

import sqlalchemy as sa
from alembic import op

revision = "0008_stats_screen_seed"
down_revision = "0007_web"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("screen_seed", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("screen_seed")
