"""trend: a gate job's runs in the catalogue, and a failed run counted, not timed

Revision ID: 0027_trend_gates_and_failures
Revises: 0026_matrix_schedules
Create Date: 2026-11-30

The catalogue read only the matrix's runs, so a branch that gates its pushes showed a
test's matrix jobs alone (11 jobs on main listed as 5), and it timed a test's failed runs:
the time to fail (12 ms) drew as its latency. A point now sums the passed runs' durations
(``runs``, its percentiles, none when every run failed) and counts the failed and errored
ones (``failures``); a gate's runs count (services/jobs/summaries.py CATALOGUE_KINDS).
The points and entries of the jobs already catalogued are summed again that way, as the
refresh sums them (the branch and percentiles as in 0020), from the untraced runs only.
"""

import math

import sqlalchemy as sa
from alembic import op

revision = "0027_trend_gates_and_failures"
down_revision = "0026_matrix_schedules"
branch_labels = None
depends_on = None

# The branch a job measured (services/diagnose/change_points.py branch_of), in SQL.
BRANCH = """COALESCE(NULLIF(s.branch, ''), CASE
    WHEN s.ref LIKE 'refs/heads/%' THEN substr(s.ref, 12)
    WHEN s.ref LIKE 'refs/%' THEN substr(s.ref, 6)
    ELSE COALESCE(s.ref, '') END)"""

# A passed run's duration, NULL otherwise: the percentiles skip NULLs.
PASSED = "CASE WHEN t.outcome = 'passed' THEN t.duration_s END"

POINTS = """
INSERT INTO test_points
    (project_id, test_id, job_id, config_label, position, branch, created_at, runs, failures, p50_s, p95_s)
SELECT j.project_id, t.test_id, j.id, c.label, min(c.position), {branch}, j.created_at,
    sum(CASE WHEN t.outcome = 'passed' THEN 1 ELSE 0 END),
    sum(CASE WHEN t.outcome = 'passed' THEN 0 ELSE 1 END),
    {p50}, {p95}
FROM test_results t
JOIN runs r ON r.id = t.run_id
JOIN job_configs c ON c.id = r.config_id
JOIN jobs j ON j.id = c.job_id
JOIN catalogued_jobs done ON done.job_id = j.id
LEFT JOIN job_sources s ON s.job_id = j.id
WHERE r.kind IN ('timing', 'focus', 'survey', 'gate') AND r.probe IS NULL AND t.outcome != 'skipped'
GROUP BY j.project_id, t.test_id, j.id, c.label, s.branch, s.ref, j.created_at
"""

ENTRIES = """
INSERT INTO test_catalogue
    (project_id, test_id, config_label, branch, runs, jobs, first_job_id, last_job_id, last_seen_at)
SELECT project_id, test_id, config_label, branch, sum(runs + failures), count(*), min(job_id), max(job_id),
    max(created_at)
FROM test_points
GROUP BY project_id, test_id, config_label, branch
"""

# The newest job's percentiles on each entry (NULL where the test failed in all its runs).
NEWEST = """
UPDATE test_catalogue SET {column} = (
    SELECT p.{point} FROM test_points p
    WHERE p.project_id = test_catalogue.project_id AND p.test_id = test_catalogue.test_id
      AND p.config_label = test_catalogue.config_label AND p.job_id = test_catalogue.last_job_id
)
"""


class _Percentile:
    """SQLite's aggregate: services/jobs/summaries.py percentile, NULLs skipped as
    PostgreSQL's percentile_cont skips them."""

    def __init__(self) -> None:
        self.values: list[float] = []
        self.q = 0.5

    def step(self, value: float | None, q: float) -> None:
        if value is not None:
            self.values.append(value)
        self.q = q

    def finalize(self) -> float | None:
        if not self.values:
            return None
        ordered = sorted(self.values)
        position = (len(ordered) - 1) * self.q
        low, high = math.floor(position), math.ceil(position)
        return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def upgrade() -> None:
    with op.batch_alter_table("test_points") as batch:
        batch.add_column(sa.Column("failures", sa.Integer(), server_default="0", nullable=False))
        batch.alter_column("p50_s", existing_type=sa.Float(), nullable=True)
        batch.alter_column("p95_s", existing_type=sa.Float(), nullable=True)
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        p50 = f"percentile_cont(0.5) WITHIN GROUP (ORDER BY {PASSED})"
        p95 = f"percentile_cont(0.95) WITHIN GROUP (ORDER BY {PASSED})"
    else:
        bind.connection.driver_connection.create_aggregate("lagtrace_percentile_passed", 2, _Percentile)
        p50 = f"lagtrace_percentile_passed({PASSED}, 0.5)"
        p95 = f"lagtrace_percentile_passed({PASSED}, 0.95)"
    op.execute("DELETE FROM test_points")
    op.execute(POINTS.format(branch=BRANCH, p50=p50, p95=p95))
    op.execute("DELETE FROM test_catalogue")
    op.execute(ENTRIES)
    op.execute(NEWEST.format(column="last_p50_s", point="p50_s"))
    op.execute(NEWEST.format(column="last_p95_s", point="p95_s"))


def downgrade() -> None:
    # The old shape has no place for a point without percentiles: those points go.
    op.execute("DELETE FROM test_points WHERE p50_s IS NULL")
    with op.batch_alter_table("test_points") as batch:
        batch.alter_column("p95_s", existing_type=sa.Float(), nullable=False)
        batch.alter_column("p50_s", existing_type=sa.Float(), nullable=False)
        batch.drop_column("failures")
