"""jobs: the kind of job, matrix or gate, and a gate's verdicts

Revision ID: 0025_job_kind
Revises: 0024_job_measured_with
Create Date: 2026-11-28

A gate compares one run of the head's suite with the base branch's stored runs; a
matrix is every configuration as before. Every job stored before was a matrix, which
the server default says, so the column needs no backfill and stays NOT NULL. A gate's
verdicts against history are stored with it (None for a matrix).
"""
from alembic import op
import sqlalchemy as sa


revision = '0025_job_kind'
down_revision = '0024_job_measured_with'
branch_labels = None
depends_on = None


# Plain ALTER TABLE, not batch mode: SQLite's batch mode copies the table and drops the
# old one, and with foreign keys on that drop cascades to every job's configurations and
# runs (tests/services/test_migrations.py downgrades past this). SQLite has had ADD and
# DROP COLUMN since 3.35 (https://www.sqlite.org/lang_altertable.html).


def upgrade() -> None:
    op.add_column(
        'jobs',
        sa.Column(
            'kind',
            sa.Enum('matrix', 'gate', name='jobkind', native_enum=False, length=32),
            server_default='matrix',
            nullable=False,
        ),
    )
    op.add_column('jobs', sa.Column('gate', sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column('jobs', 'gate')
    op.drop_column('jobs', 'kind')
