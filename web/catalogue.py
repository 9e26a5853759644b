"""The test catalogue: every test a project has run, its latency per configuration over
time, its flakiness and its open findings.

Grouping every test result on each page view would not scale (10,000 jobs of 10 runs
of 60 tests are 6 million rows), so the list reads a small summary table, one row per
test x configuration x branch (models.CatalogueEntry), which each job brings up to date
when it finishes (services/jobs/summaries.py), never a page view; a test's own page reads
its recent jobs' points, summed then too (models.CataloguePoint). Functions take a
Session first and do not commit.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, Integer, Select, Text, and_, bindparam, func, or_, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session

from services.diagnose import change_points
from services.diagnose.metrics import SlowerSinceMetrics, metrics_of
from services.jobs.summaries import percentile
from services.models import Finding, Job, JobKind, Project, TriageStatus
from services.summary_models import CatalogueEntry, CataloguePoint, ProblemSummary

PER_PAGE = 50
HISTORY_JOBS = 60
# Problems still waiting for someone: muted and fixed ones are not open.
OPEN = (TriageStatus.new, TriageStatus.acknowledged)
FLAKY_KIND = "latency_flaky"


# The branch a job measured: the change-point search groups jobs the same way.
branch_of = change_points.branch_of


@dataclass
class ConfigLatest:
    label: str
    p50_s: float | None
    p95_s: float | None
    job_id: int


@dataclass
class OpenFinding:
    """What the list shows of an open problem's newest finding."""

    id: int
    severity: str
    kind: str


@dataclass
class CatalogueRow:
    project_id: int
    project: str
    test_id: str
    runs: int = 0
    last_job_id: int = 0
    last_seen_at: dt.datetime | None = None
    jobs: int = 0
    configs: list[ConfigLatest] = field(default_factory=list)
    branches: list[str] = field(default_factory=list)
    flaky_jobs: int = 0
    open_findings: list[OpenFinding] = field(default_factory=list)

    @property
    def flaky_share(self) -> float:
        return self.flaky_jobs / self.jobs if self.jobs else 0.0


def _open_tests():
    """(project, test) pairs whose problem (fingerprint) is open in its newest finding,
    among the projects bound to ``visible``."""
    return (
        select(ProblemSummary.project_id.label("project_id"), ProblemSummary.test_id.label("test_id"))
        .join(Finding, Finding.id == ProblemSummary.latest_id)
        .where(
            ProblemSummary.project_id.in_(bindparam("visible", expanding=True)),
            Finding.status.in_(OPEN),
            ProblemSummary.test_id.is_not(None),
        )
        .distinct()
        .subquery()
    )


# The list's statements, built once a process for each shape of the filters (which of
# them are set) and database, their values bound at execution: building a statement
# and generating its cache key cost the page more Python than running it (the
# findings' join on the page's keys alone: 7 % of a catalogue view's server CPU).
_statements: dict[tuple[Any, ...], Select] = {}


def _statement(key: tuple[Any, ...], build: Callable[[], Select]) -> Select:
    found = _statements.get(key)
    if found is None:
        found = _statements[key] = build()
    return found


@dataclass(frozen=True)
class _Shape:
    """Which filters a view sets, and on which database: what its statements depend on."""

    dialect: str
    branch: bool
    config: bool
    search: bool

    def conditions(self) -> list[ColumnElement[bool]]:
        """The filters but the visible projects, on the entries, with their values bound."""
        conditions: list[ColumnElement[bool]] = []
        if self.branch:
            conditions.append(CatalogueEntry.branch == bindparam("branch"))
        if self.config:
            conditions.append(CatalogueEntry.config_label == bindparam("config"))
        if self.search:
            # The pattern goes into the statement as a quoted literal, not a parameter:
            # the planner must see it to use the trigram index (migration 0018), and a
            # prepared statement's generic plan (psycopg prepares a statement run 5
            # times) would not. literal_execute renders it at each execution.
            conditions.append(
                CatalogueEntry.test_id.ilike(bindparam("search", type_=Text, literal_execute=True), escape="\\")
            )
        return conditions


# Entries first read per test a page lists, while looking for its tests newest first.
ENTRIES_PER_TEST = 4


def catalogue(
    session: Session,
    project_ids: list[int],
    *,
    project_id: int | None = None,
    branch: str | None = None,
    config: str | None = None,
    open_only: bool = False,
    search: str | None = None,
    page: int = 0,
    per_page: int = PER_PAGE,
    names: dict[int, str] | None = None,
) -> tuple[list[CatalogueRow], bool]:
    """One page of tests, most recently run first; and whether there is a next page.
    ``names``: the projects' names by id where the caller has them (read otherwise)."""
    visible = project_ids if project_id is None else [p for p in project_ids if p == project_id]
    shape = _Shape(session.get_bind().dialect.name, branch is not None, bool(config), bool(search))
    values: dict[str, Any] = {"visible": visible, "branch": branch, "config": config}
    if search:
        escaped = search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        values["search"] = f"%{escaped}%"
    keys = _page_tests(session, shape, values, open_only, (page + 1) * per_page + 1)
    more = len(keys) > (page + 1) * per_page
    keys = keys[page * per_page : (page + 1) * per_page]
    if not keys:
        return [], False
    if names is None or any(p not in names for p, _ in keys):
        names = dict(
            session.execute(select(Project.id, Project.name).where(Project.id.in_({p for p, _ in keys}))).all()
        )
    rows = {(p, t): CatalogueRow(p, names[p], t) for p, t in keys}
    jobs: dict[tuple[int, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    latest: dict[tuple[int, str], dict[str, Any]] = defaultdict(dict)
    # Every entry of the page's tests the filters keep (columns, not objects): a row sums them.
    entries = _statement(
        ("entries", shape),
        lambda: _of_keys(
            shape.dialect,
            CatalogueEntry.project_id,
            CatalogueEntry.test_id,
            select(
                CatalogueEntry.project_id,
                CatalogueEntry.test_id,
                CatalogueEntry.config_label,
                CatalogueEntry.branch,
                CatalogueEntry.runs,
                CatalogueEntry.jobs,
                CatalogueEntry.last_job_id,
                CatalogueEntry.last_p50_s,
                CatalogueEntry.last_p95_s,
                CatalogueEntry.last_seen_at,
            ).where(*shape.conditions()),
        ),
    )
    for entry in session.execute(entries, {**values, **_key_values(shape.dialect, list(rows))}):
        key = (entry.project_id, entry.test_id)
        row = rows.get(key)
        if row is None:
            continue
        row.runs += entry.runs
        row.last_job_id = max(row.last_job_id, entry.last_job_id)
        if row.last_seen_at is None or entry.last_seen_at > row.last_seen_at:
            row.last_seen_at = entry.last_seen_at
        # A job runs every configuration: its count per branch is the largest over them.
        jobs[key][entry.branch] = max(jobs[key][entry.branch], entry.jobs)
        newest = latest[key].get(entry.config_label)
        if newest is None or entry.last_job_id > newest.last_job_id:
            latest[key][entry.config_label] = entry
        if entry.branch not in row.branches:
            row.branches.append(entry.branch)
    for key, row in rows.items():
        row.jobs = sum(jobs[key].values())
        row.configs = [
            ConfigLatest(label, e.last_p50_s, e.last_p95_s, e.last_job_id) for label, e in sorted(latest[key].items())
        ]
        row.branches.sort()
    _attach_findings(session, shape.dialect, rows)
    return list(rows.values()), more


def _of_keys(dialect: str, project: Any, test: Any, query: Select) -> Select:
    """``query`` narrowed to the rows of the (project, test) pairs bound by _key_values.

    On PostgreSQL the pairs are two array parameters, unnested and joined: each pair is
    one probe of the index on (project, test), and the statement's text is the same for
    every page. The same pairs as IN lists made a statement of 150 parameters that
    psycopg parsed again on every view (its cache keeps statements of up to 50: 2 ms a
    statement) and SQLAlchemy bound value by value (1-2 ms more). Elsewhere: IN lists,
    which keep a few rows more than the pairs (the caller skips them)."""
    if dialect != "postgresql":
        return query.where(
            project.in_(bindparam("key_project_set", expanding=True)),
            test.in_(bindparam("key_test_set", expanding=True)),
        )
    pairs = (
        func.unnest(
            bindparam("key_projects", type_=ARRAY(Integer)),
            bindparam("key_tests", type_=ARRAY(Text)),
        )
        .table_valued("project_id", "test_id")
        .render_derived(name="page_keys")
    )
    return query.join(pairs, and_(project == pairs.c.project_id, test == pairs.c.test_id))


def _key_values(dialect: str, keys: list[tuple[int, str]]) -> dict[str, list[Any]]:
    if dialect != "postgresql":
        return {"key_project_set": sorted({p for p, _ in keys}), "key_test_set": sorted({t for _, t in keys})}
    return {"key_projects": [p for p, _ in keys], "key_tests": [t for _, t in keys]}


def _page_tests(
    session: Session, shape: _Shape, values: dict[str, Any], open_only: bool, wanted: int
) -> list[tuple[int, str]]:
    """The first ``wanted`` (project, test) pairs the filters keep, most recently run first
    (then by name).

    Entries are read newest first through the index on (last_job_id DESC, test_id), a
    batch at a time: a test first appears at its newest job, and the tests of one job in
    name order, so the order of first appearances is the list's. No view groups the whole
    table (10,000 entries: 10 ms of the database's CPU a view, most of the page's cost)."""

    def build() -> Select:
        scan = (
            select(CatalogueEntry.project_id, CatalogueEntry.test_id)
            .where(CatalogueEntry.project_id.in_(bindparam("visible", expanding=True)), *shape.conditions())
            .order_by(CatalogueEntry.last_job_id.desc(), CatalogueEntry.test_id, CatalogueEntry.project_id)
        )
        if open_only:
            opened = _open_tests()
            scan = scan.join(
                opened,
                and_(opened.c.project_id == CatalogueEntry.project_id, opened.c.test_id == CatalogueEntry.test_id),
            )
        return scan.offset(bindparam("offset")).limit(bindparam("limit"))

    scan = _statement(("page", shape, open_only), build)
    found: dict[tuple[int, str], None] = {}
    # A test has an entry per configuration and branch: a few per test, then more.
    offset, batch = 0, ENTRIES_PER_TEST * wanted
    while len(found) < wanted:
        entries = session.execute(scan, {**values, "offset": offset, "limit": batch}).all()
        for project_id, test_id in entries:
            found.setdefault((project_id, test_id))
        if len(entries) < batch:
            break
        offset += batch
        batch *= 2
    return list(found)[:wanted]


def _attach_findings(session: Session, dialect: str, rows: dict[tuple[int, str], Any]) -> None:
    """Open problems (newest finding per fingerprint open) and jobs with a flaky verdict,
    read from the problems' summary (a test seen in every job has thousands of findings),
    in one query: a page's every query costs the database more than its rows do."""
    statement = _statement(
        ("findings", dialect),
        lambda: _of_keys(
            dialect,
            ProblemSummary.project_id,
            ProblemSummary.test_id,
            select(
                ProblemSummary.project_id,
                ProblemSummary.test_id,
                ProblemSummary.kind,
                ProblemSummary.recurrence,
                Finding.id,
                Finding.severity,
                Finding.status,
            )
            .join(Finding, Finding.id == ProblemSummary.latest_id)
            .where(or_(Finding.status.in_(OPEN), ProblemSummary.kind == FLAKY_KIND))
            .order_by(Finding.id),
        ),
    )
    for project_id, test_id, kind, recurrence, finding_id, severity, status in session.execute(
        statement, _key_values(dialect, list(rows))
    ):
        row = rows.get((project_id, test_id or ""))
        if row is None:
            continue
        if status in OPEN:
            row.open_findings.append(OpenFinding(finding_id, severity, kind))
        # One latency_flaky problem per test: its recurrence is the jobs that found it flaky.
        if kind == FLAKY_KIND:
            row.flaky_jobs += recurrence


# The filters' choices change when a new branch or configuration first finishes a job:
# each serving process reads them again at most this often, not on every view.
CHOICES_TTL_S = 30.0
_choices: dict[tuple[str, tuple[int, ...]], tuple[float, dict[str, list[str]]]] = {}


def choices(session: Session, project_ids: list[int]) -> dict[str, list[str]]:
    """The branches and configurations the filters offer (read at most every CHOICES_TTL_S)."""
    key = (repr(session.get_bind().engine.url), tuple(sorted(project_ids)))
    cached = _choices.get(key)
    if cached is not None and time.monotonic() - cached[0] < CHOICES_TTL_S:
        return cached[1]
    if len(_choices) > 1000:  # one key per set of visible projects
        _choices.clear()
    found = _read_choices(session, project_ids)
    _choices[key] = (time.monotonic(), found)
    return found


def _read_choices(session: Session, project_ids: list[int]) -> dict[str, list[str]]:

    def distinct(column) -> list[str]:
        return list(
            session.scalars(
                select(column).where(CatalogueEntry.project_id.in_(project_ids)).distinct().order_by(column)
            )
        )

    return {"branches": distinct(CatalogueEntry.branch), "configs": distinct(CatalogueEntry.config_label)}


@dataclass
class JobPoint:
    """One job's timings of the test: p50 and p95 per configuration of its passed runs,
    and how many runs failed there (a failure's duration is no latency: never in p50)."""

    job_id: int
    branch: str
    at: dt.datetime
    kind: JobKind = JobKind.matrix
    p50: dict[str, float] = field(default_factory=dict)
    p95: dict[str, float] = field(default_factory=dict)
    n: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)

    @property
    def failed_runs(self) -> int:
        return sum(self.failures.values())


@dataclass
class TestEntry:
    project: Project
    test_id: str
    points: list[JobPoint]  # oldest first
    labels: list[str]
    branches: list[str]  # most recently run first
    findings: list[dict[str, Any]]  # one per problem (fingerprint), newest finding
    flaky_jobs: int

    @property
    def flaky_share(self) -> float:
        return self.flaky_jobs / len(self.points) if self.points else 0.0

    @property
    def gate_jobs(self) -> int:
        return sum(1 for p in self.points if p.kind is JobKind.gate)

    @property
    def failed_jobs(self) -> int:
        return sum(1 for p in self.points if p.failed_runs)

    def spread(self, label: str) -> float | None:
        """Median over jobs of p95 / p50: how far a slow run strays in this configuration."""
        ratios = sorted(p.p95[label] / p.p50[label] for p in self.points if p.p50.get(label))
        return percentile(ratios, 0.5) if ratios else None

    def for_branch(self, branch: str) -> list[JobPoint]:
        return [p for p in self.points if p.branch == branch]

    def change_points(self, branch: str) -> list[tuple[Finding, str]]:
        """The steps found in this branch's history (slower_since), each on its first slow
        job, with a short label for the chart ("1.97x since 0014001400")."""
        steps = []
        for group in self.findings:
            finding = group["finding"]
            if finding.kind != change_points.KIND:
                continue
            step = metrics_of(finding.kind, finding.metrics)
            if not isinstance(step, SlowerSinceMetrics) or step.branch != branch:
                continue  # a stored shape the model does not read names no branch
            since = step.first_slow.commit or f"job #{finding.job_id}"
            steps.append((finding, f"{step.ratio:.2f}x since {since[:10]}"))
        return steps


def test_entry(session: Session, project: Project, test_id: str, jobs: int = HISTORY_JOBS) -> TestEntry:
    """The test's p50 and p95 per configuration in the project's newest ``jobs`` finished
    jobs that ran it, its problems and how often it was flaky.

    The points were summed when each job finished (models.CataloguePoint): the newest
    jobs' are read through the table's key, not found among the test's results (a test of
    every job has a hundred thousand) and grouped on every view."""
    key = (CataloguePoint.project_id == project.id, CataloguePoint.test_id == test_id)
    recent = select(CataloguePoint.job_id).where(*key).distinct().order_by(CataloguePoint.job_id.desc()).limit(jobs)
    by_job: dict[int, JobPoint] = {}
    labels: dict[str, int] = {}
    for job_id, branch, created_at, label, position, p50, p95, runs, failures in session.execute(
        select(
            CataloguePoint.job_id,
            CataloguePoint.branch,
            CataloguePoint.created_at,
            CataloguePoint.config_label,
            CataloguePoint.position,
            CataloguePoint.p50_s,
            CataloguePoint.p95_s,
            CataloguePoint.runs,
            CataloguePoint.failures,
        )
        .where(*key, CataloguePoint.job_id.in_(recent.scalar_subquery()))
        .order_by(CataloguePoint.job_id, CataloguePoint.position, CataloguePoint.config_label)
    ):
        point = by_job.get(job_id)
        if point is None:
            point = by_job[job_id] = JobPoint(job_id, branch, created_at)
        if p50 is not None and p95 is not None:  # none where every run of the test failed
            point.p50[label] = p50
            point.p95[label] = p95
        point.n[label] = runs
        if failures:
            point.failures[label] = failures
        labels.setdefault(label, position)
    # Which of them gated a push (one configuration) and which ran the matrix: read by key.
    for job_id, job_kind in session.execute(select(Job.id, Job.kind).where(Job.id.in_(list(by_job)))):
        by_job[job_id].kind = job_kind
    points = list(by_job.values())  # oldest first
    branches = list(dict.fromkeys(p.branch for p in reversed(points)))
    # A test seen in every job has a finding in most: their columns, then only each
    # problem's newest finding as an object (its metrics are parsed, its title shown).
    newest: dict[str, int] = {}
    jobs_of: dict[str, set[int]] = defaultdict(set)
    flaky: set[int] = set()
    for finding_id, fingerprint, job_id, kind in session.execute(
        select(Finding.id, Finding.fingerprint, Finding.job_id, Finding.kind)
        .join(Job, Job.id == Finding.job_id)
        .where(Job.project_id == project.id, Finding.test_id == test_id)
        .order_by(Finding.id)
    ):
        newest[fingerprint] = finding_id
        jobs_of[fingerprint].add(job_id)
        if kind == FLAKY_KIND and job_id in by_job:
            flaky.add(job_id)
    loaded = {f.id: f for f in session.scalars(select(Finding).where(Finding.id.in_(newest.values())))}
    # Open problems first, then the newest.
    order = sorted(newest.items(), key=lambda item: (loaded[item[1]].status not in OPEN, -item[1]))
    findings = [
        {"finding": loaded[latest], "jobs": len(jobs_of[fp]), "open": loaded[latest].status in OPEN}
        for fp, latest in order
    ]
    return TestEntry(
        project, test_id, points, sorted(labels, key=lambda lab: labels[lab]), branches, findings, len(flaky)
    )
