"""jobs: a time budget per job (issue 23)

Revision ID: 0013_job_budget
Revises: 0012_session_epoch
Create Date: 2026-11-25

Two nullable columns: the budget asked for (None: the default, a multiple of the suite's
own time) and what the budget did (its limit, what it left out). Existing jobs ran
without one.
"""
from alembic import op
import sqlalchemy as sa


revision = '0013_job_budget'
down_revision = '0012_session_epoch'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('jobs') as batch:
        batch.add_column(sa.Column('budget_s', sa.Float(), nullable=True))
        batch.add_column(sa.Column('budget', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('jobs') as batch:
        batch.drop_column('budget')
        batch.drop_column('budget_s')
