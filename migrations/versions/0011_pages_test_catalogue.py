"""pages: the test catalogue's summary table, and an index on a test's results

Revision ID: 0011_pages
Revises: 0010_daily
Create Date: 2026-11-22

New tables only and one index: existing rows keep working. The catalogue fills itself
from finished jobs the first time the dashboard's test catalogue is opened.
"""
from alembic import op
import sqlalchemy as sa


revision = '0011_pages'
down_revision = '0010_daily'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'test_catalogue',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('project_id', sa.Integer(), nullable=False),
        sa.Column('test_id', sa.Text(), nullable=False),
        sa.Column('config_label', sa.String(length=200), nullable=False),
        sa.Column('branch', sa.String(length=255), nullable=False),
        sa.Column('runs', sa.Integer(), nullable=False),
        sa.Column('jobs', sa.Integer(), nullable=False),
        sa.Column('first_job_id', sa.Integer(), nullable=False),
        sa.Column('last_job_id', sa.Integer(), nullable=False),
        sa.Column('last_p50_s', sa.Float(), nullable=True),
        sa.Column('last_p95_s', sa.Float(), nullable=True),
        sa.Column('last_seen_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ['project_id'], ['projects.id'], name=op.f('fk_test_catalogue_project_id_projects'), ondelete='CASCADE'
        ),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_test_catalogue')),
        sa.UniqueConstraint(
            'project_id', 'test_id', 'config_label', 'branch', name=op.f('uq_test_catalogue_project_id')
        ),
    )
    op.create_index(op.f('ix_test_catalogue_project_id'), 'test_catalogue', ['project_id'], unique=False)
    op.create_table(
        'catalogued_jobs',
        sa.Column('job_id', sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ['job_id'], ['jobs.id'], name=op.f('fk_catalogued_jobs_job_id_jobs'), ondelete='CASCADE'
        ),
        sa.PrimaryKeyConstraint('job_id', name=op.f('pk_catalogued_jobs')),
    )
    with op.batch_alter_table('test_results') as batch:
        batch.create_index(batch.f('ix_test_results_test_id'), ['test_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('test_results') as batch:
        batch.drop_index(batch.f('ix_test_results_test_id'))
    op.drop_table('catalogued_jobs')
    op.drop_index(op.f('ix_test_catalogue_project_id'), table_name='test_catalogue')
    op.drop_table('test_catalogue')
