"""jobs: where the screen and the drill ran and the node lock each held

Revision ID: 0016_measured_on
Revises: 0012_session_epoch
Create Date: 2026-11-25

One nullable JSON column: jobs measured before it name no node.
"""
from alembic import op
import sqlalchemy as sa


revision = '0014_measured_on'
down_revision = '0013_job_budget'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('jobs') as batch:
        batch.add_column(sa.Column('measured_on', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('jobs') as batch:
        batch.drop_column('measured_on')
