"""jobs: the node class a job's screen ran on, and the thresholds its rules judged with

Revision ID: 0024_job_measured_with
Revises: 0023_service_secrets
Create Date: 2026-11-29

A test's latency depends on the CPU model, on which CPUs the executor may use and on the
runner image, so runs of one test are comparable only within one node class
(services/jobs/node_class.py). A finding's severity depends on the thresholds
(services/thresholds.py), which each worker reads from its environment. Stored with the
job, a report says both, however the nodes and the workers change later. Nullable: jobs
measured before name neither.
"""
from alembic import op
import sqlalchemy as sa


revision = '0024_job_measured_with'
down_revision = '0023_service_secrets'
branch_labels = None
depends_on = None

# Plain ALTER TABLE, not batch mode: SQLite's batch copy of `jobs` would cascade the drop
# of the old table to every job's configurations and runs (ON DELETE CASCADE).


def upgrade() -> None:
    op.add_column('jobs', sa.Column('cpu_model', sa.String(length=200), nullable=True))
    op.add_column('jobs', sa.Column('engine_cpus', sa.String(length=200), nullable=True))
    op.add_column('jobs', sa.Column('runner_image', sa.String(length=255), nullable=True))
    op.add_column('jobs', sa.Column('thresholds', sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column('jobs', 'thresholds')
    op.drop_column('jobs', 'runner_image')
    op.drop_column('jobs', 'engine_cpus')
    op.drop_column('jobs', 'cpu_model')
