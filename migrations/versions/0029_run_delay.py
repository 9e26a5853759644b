"""runs: how long the command's main thread waited on a run queue for a CPU

Revision ID: 0029_run_delay
Revises: 0028_run_test_workers
Create Date: 2026-12-07

A run's wall time is its test durations, its start-up's CPU time and its waits. The
average busy CPUs of other processes (foreign_cpus) cannot say how long the run waited
for a CPU: behind two busy processes on one core it waits twice its own CPU time. The
kernel counts that wait per thread (/proc/PID/schedstat); the executors read it before
they reap the command, and the timing_disagrees rule counts it as time a run may take
beyond its durations (docs/reference/findings.md). Older runs keep NULL: not known.
"""

import sqlalchemy as sa
from alembic import op

revision = "0029_run_delay"
down_revision = "0028_run_test_workers"
branch_labels = None
depends_on = None


# Not in batch mode, as 0028: a batch drop on SQLite copies the runs table and cascades.


def upgrade() -> None:
    op.add_column("runs", sa.Column("run_delay_s", sa.Float(), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "run_delay_s")
