"""bisects: a bisect as a service job, and the commit each run ran at

Revision ID: 0030_bisects
Revises: 0029_run_delay
Create Date: 2026-12-07

A bisect job (jobs.kind 'bisect', services/jobs/bisect_step.py) searches the commits
between a good and a bad one for the commit that changed one test's time
(docs/explanations/bisect.md). Its request (the test, the two revisions and what they
resolved to) and its result are a row of the new bisects table; its runs are runs of the
job's one configuration, each with the commit it ran at (runs.commit_sha). Older runs
keep NULL: the job's own commit. A new table and a nullable column: nothing is backfilled.
"""

import sqlalchemy as sa
from alembic import op

revision = "0030_bisects"
down_revision = "0029_run_delay"
branch_labels = None
depends_on = None


# The column not in batch mode, as 0028: a batch drop on SQLite copies the runs table and
# cascades to every run's test results and evidence.


def upgrade() -> None:
    op.create_table(
        "bisects",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("test_id", sa.Text(), nullable=False),
        sa.Column("good", sa.String(length=255), nullable=False),
        sa.Column("bad", sa.String(length=255), nullable=False),
        sa.Column("good_sha", sa.String(length=64), nullable=True),
        sa.Column("bad_sha", sa.String(length=64), nullable=True),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_bisects_job_id_jobs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_bisects")),
    )
    op.create_index(op.f("ix_bisects_test_id"), "bisects", ["test_id"], unique=False)
    op.add_column("runs", sa.Column("commit_sha", sa.String(length=64), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "commit_sha")
    op.drop_index(op.f("ix_bisects_test_id"), table_name="bisects")
    op.drop_table("bisects")
