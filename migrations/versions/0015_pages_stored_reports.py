"""pages: each finished job's report stored once, for its page and the API

Revision ID: 0015_pages_reports
Revises: 0012_session_epoch
Create Date: 2026-11-25

A new table only: jobs finished before it have no stored report, and their pages build
it as before (one at a time, as they are opened).
"""
from alembic import op
import sqlalchemy as sa


revision = '0015_pages_reports'
down_revision = '0012_session_epoch'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'job_reports',
        sa.Column('job_id', sa.Integer(), nullable=False),
        sa.Column('report', sa.JSON(), nullable=False),
        sa.Column('page', sa.JSON(), nullable=False),
        sa.Column('finding_states', sa.JSON(), nullable=False),
        sa.Column('built_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ['job_id'], ['jobs.id'], name=op.f('fk_job_reports_job_id_jobs'), ondelete='CASCADE'
        ),
        sa.PrimaryKeyConstraint('job_id', name=op.f('pk_job_reports')),
    )


def downgrade() -> None:
    op.drop_table('job_reports')
