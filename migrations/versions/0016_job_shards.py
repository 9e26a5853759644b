"""jobs: shards of a job's tests screened on several workers (issue 23)

Revision ID: 0014_job_shards
Revises: 0012_session_epoch
Create Date: 2026-11-25

A table of the shards each job was split into, and the shard each run belongs to
(nullable: every existing run is of a job screened whole).
"""
from alembic import op
import sqlalchemy as sa


revision = '0016_job_shards'
down_revision = '0015_pages_reports'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'job_shards',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('job_id', sa.Integer(), nullable=False),
        sa.Column('index', sa.Integer(), nullable=False),
        sa.Column('tests', sa.JSON(), nullable=False),
        sa.Column('test_count', sa.Integer(), nullable=False),
        sa.Column('planned_s', sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_job_shards_job_id_jobs'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_job_shards')),
        sa.UniqueConstraint('job_id', 'index', name='uq_job_shards_job_id_index'),
    )
    op.create_index(op.f('ix_job_shards_job_id'), 'job_shards', ['job_id'], unique=False)
    with op.batch_alter_table('runs') as batch:
        batch.add_column(sa.Column('shard', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('runs') as batch:
        batch.drop_column('shard')
    op.drop_index(op.f('ix_job_shards_job_id'), table_name='job_shards')
    op.drop_table('job_shards')
