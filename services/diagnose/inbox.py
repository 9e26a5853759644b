"""What the dashboard lists: the findings inbox, jobs across projects, a test's history.

Each function takes the project ids the signed-in user may see and answers with a
bounded number of queries, whatever the number of jobs (the pages are benchmarked with
10,000 jobs and 100,000 runs).
"""

from __future__ import annotations

import datetime as dt
import functools
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Select, bindparam, case, delete, distinct, func, select, text, update
from sqlalchemy.orm import Session

from services.diagnose.findings import SEVERITY_ORDER
from services.diagnose.metrics import Metrics, metrics_of, ratio_of
from services.evidence import EvidenceKind
from services.measure.confirm import CONFIRMED
from services.models import (
    COMMAND_KINDS,
    TEST_TIMING_KINDS,
    UNTRACED,
    Evidence,
    Finding,
    Job,
    JobConfig,
    JobStatus,
    Project,
    Run,
    TestResult,
    TriageStatus,
)
from services.summary_models import ProblemSummary


def _narrowed(project_ids: list[int], project_id: int | None) -> list[int]:
    """One project if asked for and visible; none if asked for and not visible."""
    if project_id is None:
        return project_ids
    return [project_id] if project_id in project_ids else []


@dataclass
class InboxFinding:
    """What the inbox shows of a problem's newest finding (no metrics, detail or evidence
    to load and parse: its ratio comes from SQL)."""

    id: int
    job_id: int
    kind: str
    severity: str
    title: str
    test_id: str | None
    status: TriageStatus
    assignee: str | None
    regression: bool


@dataclass(frozen=True)
class Knob:
    """A cause's knob turned on the newest finding's test in its job (services/measure/confirm.py)."""

    cause: str
    confirmed: bool


@dataclass
class FindingGroup:
    """One problem (fingerprint) across jobs, represented by its newest finding."""

    latest: InboxFinding
    ratio: float  # the newest finding's (finding_ratio)
    project: str
    recurrence: int  # jobs it was found in
    first_seen: dt.datetime
    last_seen: dt.datetime
    knobs: list[Knob] = field(default_factory=list)

    @property
    def impact(self) -> float:
        return self.ratio * self.recurrence


_SHOWN = (
    Finding.id,
    Finding.job_id,
    Finding.kind,
    Finding.severity,
    Finding.title,
    Finding.test_id,
    Finding.status,
    Finding.assignee,
    Finding.regression,
)


def _group(row: Any) -> FindingGroup:
    *shown, ratio, project, recurrence, first_seen, last_seen = row
    return FindingGroup(InboxFinding(*shown), float(ratio), project, recurrence, first_seen, last_seen)


@functools.cache
def _problems_page(kind: bool, status: bool) -> Select:
    """A page of problems with their newest findings, for the filters set (values bound at
    execution: ``visible``, ``kind``, ``status``, ``offset``, ``limit``). Built once a
    process: building it and its cache key cost a third of the inbox's Python."""
    # The severity and the triage state are the newest finding's: joined before the page is cut.
    problems = (
        select(ProblemSummary)
        .join(Finding, Finding.id == ProblemSummary.latest_id)
        .where(ProblemSummary.project_id.in_(bindparam("visible", expanding=True)))
    )
    if kind:
        problems = problems.where(ProblemSummary.kind == bindparam("kind"))
    if status:
        problems = problems.where(Finding.status == bindparam("status"))
    # The page of problems first, then their newest findings: not every problem's.
    page = (
        problems.add_columns(_severity_rank(Finding.severity).label("severity_rank"))
        .order_by(
            _severity_rank(Finding.severity),
            (ProblemSummary.ratio * ProblemSummary.recurrence).desc(),
            ProblemSummary.latest_id.desc(),
        )
        .offset(bindparam("offset"))
        .limit(bindparam("limit"))
        .subquery()
    )
    return (
        select(*_SHOWN, page.c.ratio, Project.name, page.c.recurrence, page.c.first_seen, page.c.last_seen)
        .join(page, Finding.id == page.c.latest_id)
        .join(Project, Project.id == page.c.project_id)
        .order_by(page.c.severity_rank, (page.c.ratio * page.c.recurrence).desc(), Finding.id.desc())
    )


def _severity_rank(severity: Any) -> Any:
    """High first, then medium, low and info (findings.SEVERITY_ORDER), in SQL: a LOW
    finding seen in many jobs is never above a HIGH one."""
    return case(SEVERITY_ORDER, value=severity, else_=len(SEVERITY_ORDER))


def inbox(
    session: Session,
    project_ids: list[int],
    *,
    project_id: int | None = None,
    kind: str | None = None,
    status: str | None = None,
    severity: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> list[FindingGroup]:
    """Findings grouped by fingerprint, the most severe first (the newest finding's
    severity), then the most impact (slowdown ratio x recurrence).

    Kind and severity filter the findings; status filters on the newest finding of a
    group, because triage state follows the fingerprint into later jobs. Without a
    severity the groups are read from their summary (models.ProblemSummary; the kind is
    part of the fingerprint); a severity (a problem's findings may differ in it) groups
    the findings of that severity. Only the columns the page shows are read.
    """
    visible = _narrowed(project_ids, project_id)
    # Impact in SQL: only the page's groups are read.
    if not severity:
        values = {"visible": visible, "kind": kind, "offset": offset, "limit": limit}
        if status:
            values["status"] = TriageStatus(status)
        return _with_knobs(
            session, [_group(row) for row in session.execute(_problems_page(bool(kind), bool(status)), values)]
        )
    groups = (
        select(
            Finding.fingerprint,
            func.count(distinct(Finding.job_id)).label("recurrence"),
            func.min(Finding.created_at).label("first_seen"),
            func.max(Finding.created_at).label("last_seen"),
            func.max(Finding.id).label("latest_id"),
        )
        .join(Job, Job.id == Finding.job_id)
        .where(Job.project_id.in_(visible))
        .group_by(Finding.fingerprint)
    )
    if kind:
        groups = groups.where(Finding.kind == kind)
    if severity:
        groups = groups.where(Finding.severity == severity)
    grouped = groups.subquery()
    ratio = _ratio_in_sql()
    query = (
        select(*_SHOWN, ratio, Project.name, grouped.c.recurrence, grouped.c.first_seen, grouped.c.last_seen)
        .join(grouped, Finding.id == grouped.c.latest_id)
        .join(Job, Job.id == Finding.job_id)
        .join(Project, Project.id == Job.project_id)
        .order_by(_severity_rank(Finding.severity), (ratio * grouped.c.recurrence).desc(), Finding.id.desc())
        .offset(offset)
        .limit(limit)
    )
    if status:
        query = query.where(Finding.status == TriageStatus(status))
    return _with_knobs(session, [_group(row) for row in session.execute(query)])


def _with_knobs(session: Session, groups: list[FindingGroup]) -> list[FindingGroup]:
    """Each group's knobs: the confirm step's experiments on its newest finding's test (or
    whole command) in that finding's job, in one query for the page."""
    jobs = {group.latest.job_id for group in groups}
    if not jobs:
        return groups
    # A cause is confirmed where any of its knobs was (the pools' cap, then the CPU count).
    found: dict[tuple[int, str | None], dict[str, bool]] = defaultdict(dict)
    experiments = select(Evidence.job_id, Evidence.test_id, Evidence.content).where(
        Evidence.kind == EvidenceKind.confirm, Evidence.job_id.in_(jobs)
    )
    for job_id, test_id, content in session.execute(experiments.order_by(Evidence.id)):
        if isinstance(content, dict) and isinstance(content.get("cause"), str):
            causes = found[(job_id, test_id)]
            causes[content["cause"]] = causes.get(content["cause"], False) or content.get("verdict") == CONFIRMED
    for group in groups:
        causes = found.get((group.latest.job_id, group.latest.test_id), {})
        group.knobs = [Knob(cause, confirmed) for cause, confirmed in causes.items()]
    return groups


@functools.cache
def _kinds() -> Select:
    return (
        select(ProblemSummary.kind)
        .distinct()
        .where(ProblemSummary.project_id.in_(bindparam("visible", expanding=True)))
        .order_by(ProblemSummary.kind)
    )


def finding_kinds(session: Session, project_ids: list[int]) -> list[str]:
    return list(session.scalars(_kinds(), {"visible": project_ids}))


# Every problem summed afresh from the findings (the migration that made the table runs
# the same statement); tests/bench/seed_dashboard.py after inserting findings in bulk.
REBUILD_GROUPS = """
INSERT INTO finding_groups (fingerprint, project_id, kind, test_id, latest_id, recurrence, first_seen, last_seen)
SELECT g.fingerprint, j.project_id, f.kind, f.test_id, g.latest_id, g.recurrence, g.first_seen, g.last_seen
FROM (
    SELECT fingerprint, max(id) AS latest_id, count(DISTINCT job_id) AS recurrence,
           min(created_at) AS first_seen, max(created_at) AS last_seen
    FROM findings GROUP BY fingerprint
) g
JOIN findings f ON f.id = g.latest_id
JOIN jobs j ON j.id = f.job_id
"""


def _ratio_in_sql() -> Any:
    """A finding's ratio as ``finding_ratio`` computes it, in SQL."""
    metric = func.coalesce(Finding.metrics["ratio"].as_float(), 1.0)
    return case((metric > 1.0, metric), else_=1.0)


def finding_ratio(metrics: Metrics) -> float:
    """A finding's slowdown ratio, at least 1: cpu_sensitivity, latency_flaky and
    slower_since carry one; the other kinds count as 1x, so that frequency alone orders them."""
    return max(1.0, ratio_of(metrics) or 1.0)


def rebuild_groups(session: Session) -> None:
    session.execute(delete(ProblemSummary))
    session.execute(text(REBUILD_GROUPS))
    newest = select(_ratio_in_sql()).where(Finding.id == ProblemSummary.latest_id).scalar_subquery()
    session.execute(update(ProblemSummary).values(ratio=newest))


def refresh_groups(session: Session, fingerprints: set[str]) -> None:
    """Sum these problems afresh from their findings (through the index on fingerprint).
    The caller holds the projects' rows (summaries.lock_projects): two jobs of a project
    finishing at once take turns, so neither counts without the other's findings."""
    wanted = sorted(fingerprints)
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        sums = {
            fp: (recurrence, first, last, latest)
            for fp, recurrence, first, last, latest in session.execute(
                select(
                    Finding.fingerprint,
                    func.count(distinct(Finding.job_id)),
                    func.min(Finding.created_at),
                    func.max(Finding.created_at),
                    func.max(Finding.id),
                )
                .where(Finding.fingerprint.in_(chunk))
                .group_by(Finding.fingerprint)
            )
        }
        latest = {
            f.id: (f, project_id)
            for f, project_id in session.execute(
                select(Finding, Job.project_id)
                .join(Job, Job.id == Finding.job_id)
                .where(Finding.id.in_([v[3] for v in sums.values()]))
            )
        }
        known = {
            g.fingerprint: g
            for g in session.scalars(select(ProblemSummary).where(ProblemSummary.fingerprint.in_(chunk)))
        }
        for fp in chunk:
            if fp not in sums:
                if fp in known:
                    session.delete(known[fp])  # its findings are gone (a job diagnosed again)
                continue
            recurrence, first, last, latest_id = sums[fp]
            finding, project_id = latest[latest_id]
            group = known.get(fp)
            if group is None:
                group = ProblemSummary(fingerprint=fp)
                session.add(group)
            group.project_id = project_id
            group.kind = finding.kind
            group.test_id = finding.test_id
            group.latest_id = latest_id
            group.ratio = finding_ratio(metrics_of(finding.kind, finding.metrics))
            group.recurrence = recurrence
            group.first_seen = first
            group.last_seen = last
    session.flush()


@dataclass
class JobRow:
    """What the job list shows of a job."""

    id: int
    parent_id: int | None
    status: JobStatus
    command: list[Any]
    created_at: dt.datetime
    project: str
    runs: int
    findings: int
    configs: list[str] = field(default_factory=list)  # labels, in the job's order


def job_list(
    session: Session,
    project_ids: list[int],
    *,
    project_id: int | None = None,
    status: str | None = None,
    limit: int = 50,
    before_id: int | None = None,
) -> list[JobRow]:
    """Newest jobs first (keyset pagination on the id), with their run and finding counts:
    the columns the page shows and the counts in one query, the configurations' labels in
    a second (no Job objects: their JSON columns are not shown)."""
    visible = _narrowed(project_ids, project_id)
    runs = (
        select(func.count(Run.id))
        .join(JobConfig, JobConfig.id == Run.config_id)
        .where(JobConfig.job_id == Job.id)
        .scalar_subquery()
    )
    findings = select(func.count(Finding.id)).where(Finding.job_id == Job.id).scalar_subquery()
    query = (
        select(Job.id, Job.parent_id, Job.status, Job.command, Job.created_at, Project.name, runs, findings)
        .join(Project, Project.id == Job.project_id)
        .where(Job.project_id.in_(visible))
        .order_by(Job.id.desc())
        .limit(limit)
    )
    if status:
        query = query.where(Job.status == JobStatus(status))
    if before_id:
        query = query.where(Job.id < before_id)
    rows = [JobRow(*row) for row in session.execute(query)]
    if rows:
        by_id = {row.id: row for row in rows}
        for job_id, label in session.execute(
            select(JobConfig.job_id, JobConfig.label)
            .where(JobConfig.job_id.in_(by_id))
            .order_by(JobConfig.job_id, JobConfig.position)
        ):
            by_id[job_id].configs.append(label)
    return rows


HISTORY_JOBS = 20


def latency_history(session: Session, job: Job, test_id: str | None) -> list[dict[str, Any]]:
    """Median per configuration of ``test_id`` (None: the whole command) in the project's
    recent finished jobs up to this one, oldest first: is it getting worse?"""
    recent = list(
        session.scalars(
            select(Job.id)
            .where(Job.project_id == job.project_id, Job.id <= job.id, Job.status == JobStatus.done)
            .order_by(Job.id.desc())
            .limit(HISTORY_JOBS)
        )
    )
    if test_id is None:
        query = (
            select(JobConfig.job_id, JobConfig.label, Run.wall_s)
            .join(Run)
            .where(JobConfig.job_id.in_(recent), Run.kind.in_(COMMAND_KINDS), UNTRACED)
        )
    else:
        query = (
            select(JobConfig.job_id, JobConfig.label, TestResult.duration_s)
            .select_from(TestResult)
            .join(Run)
            .join(JobConfig)
            .where(
                JobConfig.job_id.in_(recent),
                Run.kind.in_(TEST_TIMING_KINDS),
                TestResult.test_id == test_id,
                TestResult.outcome != "skipped",
            )
        )
    values: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for job_id, label, seconds in session.execute(query):
        values[job_id][label].append(seconds)
    return [
        {"job_id": job_id, "medians": {label: statistics.median(v) for label, v in values[job_id].items()}}
        for job_id in sorted(values)
    ]
