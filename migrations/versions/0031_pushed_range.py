"""pushed range: what a push brought, so a regression it shows can be bisected

Revision ID: 0031_pushed_range
Revises: 0030_bisects
Create Date: 2026-12-07

A push's webhook names the commit the branch pointed at before it (``before``) and the
commits it brought (``commits``). A gate that finds a test regressed on a push of several
commits starts a bisect between the two (services/jobs/bisect_jobs.py
``bisect_regressions``, docs/guides/github.md), unless the repository's .lagtrace.yml says
``bisect_regressions: false`` (stored at prepare, as ``fail_on`` is). Nullable columns:
jobs stored before them have no range and start no bisect.
"""

import sqlalchemy as sa
from alembic import op

revision = "0031_pushed_range"
down_revision = "0030_bisects"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Not in batch mode (as 0028): SQLite adds a nullable column in place.
    op.add_column("job_sources", sa.Column("before_commit_sha", sa.String(length=64), nullable=True))
    op.add_column("job_sources", sa.Column("pushed_commits", sa.Integer(), nullable=True))
    op.add_column("job_sources", sa.Column("bisect_regressions", sa.Boolean(), nullable=True))
    # The small bisects table in batch mode: SQLite adds a foreign key only by copying it.
    with op.batch_alter_table("bisects") as batch:
        batch.add_column(sa.Column("started_by_job_id", sa.Integer(), nullable=True))
        batch.create_foreign_key(
            batch.f("fk_bisects_started_by_job_id_jobs"), "jobs", ["started_by_job_id"], ["id"], ondelete="SET NULL"
        )


def downgrade() -> None:
    with op.batch_alter_table("bisects") as batch:
        batch.drop_constraint(batch.f("fk_bisects_started_by_job_id_jobs"), type_="foreignkey")
        batch.drop_column("started_by_job_id")
    op.drop_column("job_sources", "bisect_regressions")
    op.drop_column("job_sources", "pushed_commits")
    op.drop_column("job_sources", "before_commit_sha")
