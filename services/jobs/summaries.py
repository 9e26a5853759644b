"""What the pages read of a finished job, made once when the job finishes, never in a GET.

A job's v1 report walks every test result (a 5,000-test suite: 10,000 rows and more, half
a second of Python): it is built when the job finishes and stored (models.JobReport) with
a digest for the job page, which shows the tests with a finding, the widest spreads and
the slowest few, and counts the rest. The test catalogue's summary table reads the
finished jobs here too. Functions take a Session first and do not commit.
"""

from __future__ import annotations

import datetime as dt
import math
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Text, cast, exists, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from services.diagnose import change_points, inbox
from services.diagnose.report_parts import Diagnosis, Number, ReportFinding
from services.jobs.report import build_report
from services.jobs.report_schema import Report, ReportConfig, ReportJob, ReportTest, parse_report, report_json
from services.models import (
    TEST_HISTORY_KINDS,
    UNTRACED,
    Finding,
    Job,
    JobConfig,
    JobSource,
    JobStatus,
    Project,
    Run,
    RunKind,
    TestResult,
    utcnow,
)
from services.summary_models import CataloguedJob, CatalogueEntry, CataloguePoint, JobReport
from services.thresholds import Thresholds

# The job page's tests besides the flagged ones: the widest spreads across configurations
# and the slowest; the others are counted, and listed on the job's paged test list.
WIDEST_SHOWN = 15
SLOWEST_SHOWN = 5
# Of a pull request's comparison, the page lists the tests whose verdict is not
# "unchanged" (at most this many) and counts the unchanged ones.
COMPARISON_SHOWN = 200
# Finished jobs the catalogue reads per refresh: a backlog (an upgrade over a long
# history) is worked off over a few finished jobs instead of stalling one.
REFRESH_JOBS = 200
# Trend points inserted per statement (a 5,000-test suite's job has 10,000 of them).
POINTS_BATCH = 5000
# The runs whose test durations the catalogue and a test's trend read: the history's, and
# every run of a gate job (its run of the suite and its narrowed reruns, each an untraced
# timing in the gate's configuration). Without a gate's, a branch that gates its pushes
# showed only its matrix jobs (docs/guides/dashboard.md, the test catalogue).
CATALOGUE_KINDS = (*TEST_HISTORY_KINDS, RunKind.gate)


def after_finish(session: Session, job: Job, thresholds: Thresholds, earlier: Iterable[Job] = ()) -> None:
    """A job has just finished: store its report, sum its problems again and bring the
    catalogue up to date; ``earlier``: jobs that just gained a finding (a change point
    this job completed), whose reports are stored again."""
    earlier = list(earlier)
    lock_projects(session, [job.project_id])
    inbox.refresh_groups(session, {f.fingerprint for other in [job, *earlier] for f in other.findings})
    store_report(session, job, thresholds)
    for other in earlier:
        store_report(session, other, thresholds)
    if job.status is JobStatus.done:
        refresh_catalogue(session, [job.project_id])


def lock_projects(session: Session, project_ids: list[int]) -> None:
    """Hold these projects' rows until the caller commits: the summaries of one project
    are brought up to date by one transaction at a time (in id order: no deadlock)."""
    session.execute(select(Project.id).where(Project.id.in_(project_ids)).order_by(Project.id).with_for_update())


# --- the stored report ---------------------------------------------------------------------


def store_report(session: Session, job: Job, thresholds: Thresholds) -> JobReport:
    """Build ``job``'s report and store it with its page digest (again if stored before:
    a later job's change point adds a finding to an earlier one)."""
    report = build_report(job, thresholds)
    stored = session.get(JobReport, job.id)
    if stored is None:
        stored = JobReport(job_id=job.id)
        session.add(stored)
    # The stored JSON is an edge: the model is serialised here, and read back in stored_report.
    stored.report = report_json(report)
    stored.page = page_digest(report)
    stored.finding_states = {str(f.id): f.status for f in report.findings}
    stored.built_at = utcnow()
    session.flush()
    return stored


def _spread(test: ReportTest) -> float:
    medians = [c.median for c in test.configs if c.median]
    return max(medians) / min(medians) if medians else 0.0


def _slowest(test: ReportTest) -> float:
    return max((c.median or 0.0 for c in test.configs), default=0.0)


def page_digest(report: Report) -> dict[str, Any]:
    """The report as the job page shows it, as JSON (what the dashboard and the job detail
    serve): every section but the tests, of which those with a finding, the widest spreads
    and the slowest few; ``tests_total``, ``tests_hidden`` and ``tests_cleared`` count them."""
    tests = report.tests
    flagged = {f.test for f in report.findings if f.test}
    chosen = [t for t in tests if t.id in flagged]
    rest = [t for t in tests if t.id not in flagged]
    chosen += sorted(rest, key=lambda t: -_spread(t))[:WIDEST_SHOWN]
    picked = {t.id for t in chosen}
    chosen += sorted((t for t in rest if t.id not in picked), key=lambda t: -_slowest(t))[:SLOWEST_SHOWN]
    # Each run's duration stays in the full report; the page shows medians.
    shown = [t.model_dump(mode="json", exclude_unset=True, exclude={"configs": {"__all__": {"runs"}}}) for t in chosen]
    digest = {
        **report.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude={"tests"}),
        "tests": shown,
        "tests_total": len(tests),
        "tests_hidden": len(tests) - len(shown),
        "tests_cleared": sum(1 for t in tests if t.cleared),
    }
    base = report.base_comparison
    if base:
        changed = [t for t in base.tests if t.verdict != "unchanged"]
        digest["base_comparison"] = {
            **base.model_dump(mode="json", exclude_unset=True, exclude={"tests"}),
            "tests": [t.model_dump(mode="json", exclude_unset=True) for t in changed[:COMPARISON_SHOWN]],
            "unchanged_hidden": len(base.tests) - len(changed[:COMPARISON_SHOWN]),
        }
    return digest


class _PageRead(BaseModel):
    # The digest holds every section of the report and its counts; what these models do not
    # read stays in the JSON, which is served as it is.
    model_config = ConfigDict(extra="ignore")


class PageTestConfig(_PageRead):
    """A shown test in one configuration: its median, without its runs (page_digest)."""

    label: str
    median: Number | None = None
    n: int | None = None


class PageTest(_PageRead):
    id: str
    configs: list[PageTestConfig]


class Page(_PageRead):
    """The page digest (page_digest's JSON, stored or made now) read by attribute: the
    sections the comparison with a parent job (services/jobs/submit.py), the job page's
    matrix (web/matrix.py) and a finding's story (web/story.py) read. The digest dumped
    them as the report's models, whole but for the shown tests' runs (PageTest)."""

    job: ReportJob
    configs: list[ReportConfig]
    tests: list[PageTest]
    findings: list[ReportFinding]
    diagnoses: list[Diagnosis] = []


def read_page(page: dict[str, Any]) -> Page:
    """A page digest read back (raises pydantic.ValidationError if it is not one)."""
    return Page.model_validate(page)


def stored_report(session: Session, job: Job) -> Report | None:
    """The report stored when ``job`` finished, validated into the model as it is read (the
    stored JSON is an edge), with each finding's triage state as it is now; None if none
    was stored (a job finished before 0015)."""
    stored = session.scalar(select(JobReport.report).where(JobReport.job_id == job.id))
    if stored is None:
        return None
    report = parse_report(stored)
    states = _finding_states(session, job)
    for finding in report.findings:
        finding.status = states.get(finding.id, finding.status)  # type: ignore[assignment]
    return report


def stored_page(session: Session, job: Job) -> dict[str, Any] | None:
    """The page digest stored when ``job`` finished (page_digest: JSON the dashboard and the
    job detail serve as it is), with each finding's triage state as it is now; None if none
    was stored."""
    page = session.scalar(select(JobReport.page).where(JobReport.job_id == job.id))
    if page is None:
        return None
    states = _finding_states(session, job)
    for finding in page["findings"]:
        finding["status"] = states.get(finding["id"], finding["status"])
    return page


# Stored reports as text, kept by each serving process (stored_report_text): a 5,000-test
# suite's is 1.4 MB, which cost the database 6 ms a request to read out. At most this
# many bytes, the least recently served dropped first.
REPORT_TEXT_CACHE_BYTES = 64 * 1024 * 1024
_report_texts: OrderedDict[tuple[str, int], tuple[dt.datetime, str]] = OrderedDict()
_report_texts_lock = threading.Lock()


def stored_report_text(session: Session, job: Job) -> str | None:
    """The stored report as JSON text, unparsed (a 5,000-test suite's is a megabyte: parsing
    and serialising it again cost 60 ms a request), if no finding's triage state changed
    since it was stored; None otherwise (``stored_report`` then reads it with the states now).

    The text is kept per process under the job and when it was stored: a report stored
    again (store_report: a later job's change point added a finding) has another
    ``built_at``, and is read again."""
    row = session.execute(
        select(JobReport.built_at, JobReport.finding_states).where(JobReport.job_id == job.id)
    ).one_or_none()
    if row is None:
        return None
    built_at, states = row
    if states != {str(key): value for key, value in _finding_states(session, job).items()}:
        return None
    key = (repr(session.get_bind().engine.url), job.id)
    with _report_texts_lock:
        kept = _report_texts.get(key)
        if kept is not None and kept[0] == built_at:
            _report_texts.move_to_end(key)
            return kept[1]
    text = session.scalar(
        select(cast(JobReport.report, Text)).where(JobReport.job_id == job.id, JobReport.built_at == built_at)
    )
    if text is None:  # stored again since the first read: the caller reads it as it is now
        return None
    if len(text) <= REPORT_TEXT_CACHE_BYTES // 4:
        with _report_texts_lock:
            _report_texts[key] = (built_at, text)
            _report_texts.move_to_end(key)
            held = sum(len(kept_text) for _, kept_text in _report_texts.values())
            while held > REPORT_TEXT_CACHE_BYTES and len(_report_texts) > 1:
                _, (_, dropped) = _report_texts.popitem(last=False)
                held -= len(dropped)
    return text


def _finding_states(session: Session, job: Job) -> dict[int, str]:
    """Each of the job's findings' triage state now, read as two columns, not as findings."""
    return {
        key: status.value
        for key, status in session.execute(select(Finding.id, Finding.status).where(Finding.job_id == job.id))
    }


# --- the test catalogue ----------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 1]."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def refresh_catalogue(session: Session, project_ids: list[int], limit: int = REFRESH_JOBS) -> int:
    """Add up to ``limit`` finished, not yet read jobs to the catalogue; returns how many.

    Refreshes of one project take turns (a lock on its row, until the caller commits), so
    two jobs finishing at once do not count the same jobs twice; should two still collide
    on catalogued_jobs' primary key, the second leaves the work to the next refresh.
    """
    if not project_ids:
        return 0
    lock_projects(session, project_ids)
    try:
        with session.begin_nested():
            return _refresh(session, project_ids, limit)
    except IntegrityError:
        return 0


def _refresh(session: Session, project_ids: list[int], limit: int) -> int:
    pending = list(
        session.scalars(
            select(Job.id)
            .where(
                Job.project_id.in_(project_ids),
                Job.status == JobStatus.done,
                ~exists().where(CataloguedJob.job_id == Job.id),
            )
            .order_by(Job.id)
            .limit(limit)
        )
    )
    if not pending:
        return 0
    rows = session.execute(
        select(
            Job.id,
            Job.project_id,
            Job.created_at,
            JobSource.ref,
            JobSource.branch,
            JobConfig.label,
            JobConfig.position,
            TestResult.test_id,
            TestResult.duration_s,
            TestResult.outcome,
        )
        .select_from(TestResult)
        .join(Run, Run.id == TestResult.run_id)
        .join(JobConfig, JobConfig.id == Run.config_id)
        .join(Job, Job.id == JobConfig.job_id)
        .outerjoin(JobSource, JobSource.job_id == Job.id)
        .where(Job.id.in_(pending), Run.kind.in_(CATALOGUE_KINDS), UNTRACED, TestResult.outcome != "skipped")
    )
    # (project, test, configuration, branch) -> job -> durations of the passed runs
    seen: dict[tuple[int, str, str, str], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    # The same key -> job -> runs in which the test failed or errored
    failed: dict[tuple[int, str, str, str], dict[int, int]] = defaultdict(lambda: defaultdict(int))
    when: dict[int, dt.datetime] = {}
    positions: dict[tuple[int, str], int] = {}
    for job_id, project_id, created_at, ref, branch, label, position, test_id, duration, outcome in rows:
        key = (project_id, test_id, label, change_points.branch_of(ref, branch))
        durations = seen[key][job_id]  # a job whose runs all failed keeps its (empty) entry
        if outcome == "passed":
            durations.append(duration)
        else:
            # A failing test's duration is the time it took to fail, not its latency: its
            # trend marks the failure instead of drawing it (tests/e2e/test_trend_browser.py).
            failed[key][job_id] += 1
        when[job_id] = created_at
        positions[(job_id, label)] = position
    # Each job's point of each test and configuration, for the test's trend chart.
    points = [
        {
            "project_id": project_id,
            "test_id": test_id,
            "job_id": job_id,
            "config_label": label,
            "position": positions[(job_id, label)],
            "branch": branch,
            "created_at": when[job_id],
            "runs": len(durations),
            "failures": failed[(project_id, test_id, label, branch)].get(job_id, 0),
            "p50_s": percentile(durations, 0.5) if durations else None,
            "p95_s": percentile(durations, 0.95) if durations else None,
        }
        for (project_id, test_id, label, branch), per_job in seen.items()
        for job_id, durations in per_job.items()
    ]
    for start in range(0, len(points), POINTS_BATCH):
        session.execute(insert(CataloguePoint), points[start : start + POINTS_BATCH])
    tests = {key[1] for key in seen}
    existing: dict[tuple[int, str, str, str], CatalogueEntry] = {}
    ordered = sorted(tests)
    for start in range(0, len(ordered), 500):
        for entry in session.scalars(
            select(CatalogueEntry).where(
                CatalogueEntry.project_id.in_({key[0] for key in seen}),
                CatalogueEntry.test_id.in_(ordered[start : start + 500]),
            )
        ):
            existing[(entry.project_id, entry.test_id, entry.config_label, entry.branch)] = entry
    for key, per_job in seen.items():
        newest = max(per_job)
        durations = per_job[newest]
        found = existing.get(key)
        if found is None:
            found = CatalogueEntry(
                project_id=key[0],
                test_id=key[1],
                config_label=key[2],
                branch=key[3],
                runs=0,
                jobs=0,
                first_job_id=min(per_job),
                last_job_id=0,
            )
            session.add(found)
        entry = found
        entry.runs += sum(len(v) for v in per_job.values()) + sum(failed[key].values())
        entry.jobs += len(per_job)
        entry.first_job_id = min(entry.first_job_id, *per_job)
        if newest > entry.last_job_id:
            entry.last_job_id = newest
            # The newest job's latency: none where the test failed in each of its runs.
            entry.last_p50_s = percentile(durations, 0.5) if durations else None
            entry.last_p95_s = percentile(durations, 0.95) if durations else None
            entry.last_seen_at = when[newest]
    session.add_all(CataloguedJob(job_id=job_id) for job_id in pending)
    session.flush()
    return len(pending)
