"""workers: each running worker's row, refreshed by its heartbeat while it is alive

Revision ID: 0022_workers
Revises: 0021_shard_notes
Create Date: 2026-11-27

A worker heartbeat only the steps it ran, so an idle worker, or none at all, left no
trace in the database: a queued job could not say that no worker was running, and
/readyz could not count them. Each worker's main process now keeps a row here fresh.
"""
from alembic import op
import sqlalchemy as sa


revision = '0022_workers'
down_revision = '0021_shard_notes'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'workers',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('name', sa.String(length=200), nullable=False),
        sa.Column('node', sa.String(length=255), nullable=True),
        sa.Column('cpus', sa.String(length=255), nullable=False),
        sa.Column('cpu_model', sa.String(length=200), nullable=True),
        sa.Column('concurrency', sa.Integer(), nullable=False),
        sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('heartbeat_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_workers')),
        sa.UniqueConstraint('name', name=op.f('uq_workers_name')),
    )
    op.create_index(op.f('ix_workers_heartbeat_at'), 'workers', ['heartbeat_at'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_workers_heartbeat_at'), table_name='workers')
    op.drop_table('workers')
