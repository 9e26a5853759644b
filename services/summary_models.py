"""The read models: tables summed once as a job finishes (services/jobs/summaries.py) so
that no page view groups every test result or finding. Their rows can always be rebuilt
from the tables in services/models.py (tests/services/jobs/test_summaries.py)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from services.models import Base, utcnow


class CatalogueEntry(Base):
    """One test in one configuration on one branch, summed over the jobs the dashboard's
    test catalogue has read (web/catalogue.py brings it up to date): the catalogue lists
    and filters this small table instead of grouping every test result."""

    __tablename__ = "test_catalogue"
    __table_args__ = (UniqueConstraint("project_id", "test_id", "config_label", "branch"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    test_id: Mapped[str] = mapped_column(Text)
    config_label: Mapped[str] = mapped_column(String(200))
    branch: Mapped[str] = mapped_column(String(255))  # "" when the job had no branch (an archive)
    runs: Mapped[int] = mapped_column(Integer)  # timing runs that ran the test
    jobs: Mapped[int] = mapped_column(Integer)
    first_job_id: Mapped[int] = mapped_column(Integer)
    last_job_id: Mapped[int] = mapped_column(Integer)
    # The newest job's median and 95th percentile, for the list (the entry page has the history).
    last_p50_s: Mapped[float | None] = mapped_column(Float)
    last_p95_s: Mapped[float | None] = mapped_column(Float)
    last_seen_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


# The list reads entries newest first, then by name, a page's worth at a time
# (web/catalogue.py _page_tests), scanning this index backwards: a suite's newest job has
# thousands of entries, which it would otherwise sort by name on every view.
Index(
    "ix_test_catalogue_newest",
    CatalogueEntry.last_job_id,
    CatalogueEntry.test_id.desc(),
    CatalogueEntry.project_id.desc(),
)


class CataloguePoint(Base):
    """One finished job's timings of one test in one configuration: the median and 95th
    percentile of its durations there, for the test's trend chart (web/catalogue.py
    test_entry). Written with the catalogue's entries when the job finishes
    (services/jobs/summaries.py), so a test's page reads its newest jobs' points through
    the primary key instead of finding them among a million test results and grouping
    them on every view."""

    __tablename__ = "test_points"

    # The key's order is the page's read: a project's test, newest jobs first.
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True)
    test_id: Mapped[str] = mapped_column(Text, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True, index=True)
    config_label: Mapped[str] = mapped_column(String(200), primary_key=True)
    position: Mapped[int] = mapped_column(Integer)  # the configuration's in its job
    branch: Mapped[str] = mapped_column(String(255))  # as CatalogueEntry's
    created_at: Mapped[dt.datetime] = mapped_column()  # the job's
    runs: Mapped[int] = mapped_column(Integer)  # passed runs, whose durations are summed up
    # Runs in which the test failed or errored: marked on the chart, never drawn as latency
    # (the time to fail is no latency). A job whose every run failed has no percentiles.
    failures: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    p50_s: Mapped[float | None] = mapped_column(Float)
    p95_s: Mapped[float | None] = mapped_column(Float)


class CataloguedJob(Base):
    """A finished job whose test results are in the catalogue (read once)."""

    __tablename__ = "catalogued_jobs"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)


class JobReport(Base):
    """A finished job's v1 report, built once when it finished (services/jobs/summaries.py),
    and the digest of it the job page shows: a 5,000-test suite's report is rebuilt by no
    page view. Findings' triage states are read fresh over it."""

    __tablename__ = "job_reports"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    report: Mapped[dict[str, Any]] = mapped_column()
    page: Mapped[dict[str, Any]] = mapped_column()
    # Each finding's triage state when stored ({id: status}): while they are still the
    # same, the stored report is served as it is, without parsing it.
    finding_states: Mapped[dict[str, Any]] = mapped_column(default=dict)
    built_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class ProblemSummary(Base):
    """One problem (a fingerprint: project, kind, test) summed over its findings, for the
    inbox and the catalogue's open findings: how many jobs it appeared in, when first and
    last, and its newest finding (whose triage state is the problem's). Brought up to date
    when a job's findings are stored (services/jobs/summaries.py), so no page view groups
    every finding."""

    __tablename__ = "finding_groups"

    fingerprint: Mapped[str] = mapped_column(String(64), primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(32))
    test_id: Mapped[str | None] = mapped_column(Text)
    latest_id: Mapped[int] = mapped_column(Integer)
    recurrence: Mapped[int] = mapped_column(Integer)
    first_seen: Mapped[dt.datetime] = mapped_column()
    last_seen: Mapped[dt.datetime] = mapped_column()
    # The newest finding's slowdown ratio, at least 1 (1 for kinds without one): the inbox
    # orders by ratio x recurrence without parsing every problem's metrics (JSON) per view.
    ratio: Mapped[float] = mapped_column(Float, default=1.0, server_default="1")
