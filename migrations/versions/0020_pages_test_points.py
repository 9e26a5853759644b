"""pages: each finished job's p50 and p95 of each test per configuration, for its trend chart

Revision ID: 0020_pages_test_points
Revises: 0019_pages_findings_by_test
Create Date: 2026-11-27

A test's page in the catalogue found its newest jobs among the test's results, then
grouped their results (a test of one job in three of 10,000: 80 ms of PostgreSQL a
view, the catalogue's slowest page). The catalogue's refresh now keeps one point per job,
test and configuration (models.CataloguePoint) as each job finishes; this migration adds
the points of the jobs already catalogued, summed as the refresh sums them: the branch as
change_points.branch_of names it, the percentiles interpolated between closest ranks
(PostgreSQL's percentile_cont; on SQLite the same interpolation in Python).
"""

import math

from alembic import op
import sqlalchemy as sa


revision = "0020_pages_test_points"
down_revision = "0019_pages_findings_by_test"
branch_labels = None
depends_on = None

# The branch a job measured (services/diagnose/change_points.py branch_of), in SQL.
BRANCH = """COALESCE(NULLIF(s.branch, ''), CASE
    WHEN s.ref LIKE 'refs/heads/%' THEN substr(s.ref, 12)
    WHEN s.ref LIKE 'refs/%' THEN substr(s.ref, 6)
    ELSE COALESCE(s.ref, '') END)"""

BACKFILL = """
INSERT INTO test_points (project_id, test_id, job_id, config_label, position, branch, created_at, runs, p50_s, p95_s)
SELECT j.project_id, t.test_id, j.id, c.label, min(c.position), {branch}, j.created_at, count(*), {p50}, {p95}
FROM test_results t
JOIN runs r ON r.id = t.run_id
JOIN job_configs c ON c.id = r.config_id
JOIN jobs j ON j.id = c.job_id
JOIN catalogued_jobs done ON done.job_id = j.id
LEFT JOIN job_sources s ON s.job_id = j.id
WHERE r.kind IN ('timing', 'focus', 'survey') AND t.outcome != 'skipped'
GROUP BY j.project_id, t.test_id, j.id, c.label, s.branch, s.ref, j.created_at
"""


class _Percentile:
    """SQLite's aggregate for the backfill: services/jobs/summaries.py percentile."""

    def __init__(self) -> None:
        self.values: list[float] = []
        self.q = 0.5

    def step(self, value: float, q: float) -> None:
        self.values.append(value)
        self.q = q

    def finalize(self) -> float:
        ordered = sorted(self.values)
        position = (len(ordered) - 1) * self.q
        low, high = math.floor(position), math.ceil(position)
        return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def upgrade() -> None:
    op.create_table(
        "test_points",
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("test_id", sa.Text(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("config_label", sa.String(length=200), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("branch", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("p50_s", sa.Float(), nullable=False),
        sa.Column("p95_s", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_test_points_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name=op.f("fk_test_points_project_id_projects"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("project_id", "test_id", "job_id", "config_label", name=op.f("pk_test_points")),
    )
    # A deleted job's points go with it (ON DELETE CASCADE looks them up by job).
    op.create_index(op.f("ix_test_points_job_id"), "test_points", ["job_id"], unique=False)
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        p50 = "percentile_cont(0.5) WITHIN GROUP (ORDER BY t.duration_s)"
        p95 = "percentile_cont(0.95) WITHIN GROUP (ORDER BY t.duration_s)"
    else:
        bind.connection.driver_connection.create_aggregate("lagtrace_percentile", 2, _Percentile)
        p50, p95 = "lagtrace_percentile(t.duration_s, 0.5)", "lagtrace_percentile(t.duration_s, 0.95)"
    op.execute(BACKFILL.format(branch=BRANCH, p50=p50, p95=p95))


def downgrade() -> None:
    op.drop_index(op.f("ix_test_points_job_id"), table_name="test_points")
    op.drop_table("test_points")
