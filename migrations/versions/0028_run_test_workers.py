"""runs: how many processes ran a run's tests at once (pytest-xdist's workers)

Revision ID: 0028_run_test_workers
Revises: 0027_trend_gates_and_failures
Create Date: 2026-12-07

A run's test durations are the job's own numbers (its pytest writes them): their sum can
reach the run's wall time, which lagtrace measures outside the job, only once per process
running tests at once. The count is read from the command and its configuration when the
run is taken (the checkout is gone when the rules run), and the timing_disagrees rule
holds the durations against it (docs/reference/findings.md). Older runs keep NULL: not
known, never judged.
"""

import sqlalchemy as sa
from alembic import op

revision = "0028_run_test_workers"
down_revision = "0027_trend_gates_and_failures"
branch_labels = None
depends_on = None


# Not in batch mode: on SQLite a batch drop copies the runs table into a new one, and
# dropping the old one cascades to every run's test results and evidence
# (tests/services/test_migrations.py downgrades past this one and back). SQLite has
# ALTER TABLE ... DROP COLUMN since 3.35.


def upgrade() -> None:
    op.add_column("runs", sa.Column("test_workers", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "test_workers")
