"""slower_since: since which push a test is slower on a branch.

After a job on a watched branch (LAGTRACE_CHANGE_POINT_BRANCHES, default main) finishes,
each test and configuration it ran gets one point per pushed commit of the branch's
recent history: the median of the test's timing runs in that commit's jobs (a rerun of a
commit adds runs to its point rather than a point of its own). The series goes through
E-Divisive means as Apache Otava runs it (Fleming et al., "Hunter: Using Change Point
Detection to Hunt for Performance Regressions", ICPE 2023): divisive splits in sliding
windows, each kept while a Student's t-test between the neighbouring segments is
significant. A change point that makes the test slower, by enough and with enough
pushes on each side (thresholds.py, slower_since_*), becomes a finding on the job of the
first slow commit, naming the last fast one: the push that did it gets the finding, its
job page and its check run say so, and triage follows it like any other finding.

A change point is found again after every later job; it is one problem, not one per job:
a stored finding whose first slow push lies between the change point's neighbours (the
segments around it) is the same step, and nothing new is stored.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from sqlalchemy import ColumnElement, and_, or_, select
from sqlalchemy.orm import Session

from services.diagnose import triage
from services.diagnose.findings import Severity, fingerprint, format_seconds
from services.diagnose.metrics import PushesMedian, PushRef, SlowerSinceMetrics, metrics_of
from services.measure.stats import Summary, median_interval
from services.models import (
    TEST_HISTORY_KINDS,
    UNTRACED,
    Finding,
    Job,
    JobConfig,
    JobSource,
    JobStatus,
    Run,
    TestResult,
)
from services.thresholds import Thresholds

KIND = "slower_since"
METHOD = "E-Divisive means with a t-test (Apache Otava 0.8)"
# Test ids per IN (...) list: a suite of thousands of tests stays within any driver's limits.
CHUNK = 1000


def branch_of(ref: str | None, branch: str | None = None) -> str:
    """The branch a job measured, as people name it ("" when it had none: an archive): the
    branch its trigger named (a pull request's head branch), else its ref's."""
    if branch:
        return branch
    if not ref:
        return ""
    for prefix in ("refs/heads/", "refs/"):
        if ref.startswith(prefix):
            return ref[len(prefix) :]
    return ref


def on_branch(branch: str) -> ColumnElement[bool]:
    """A JobSource measured ``branch``: as branch_of names it, in SQL."""
    return or_(
        JobSource.branch == branch,
        and_(JobSource.branch.is_(None), JobSource.ref.in_([branch, f"refs/heads/{branch}", f"refs/{branch}"])),
    )


@dataclass(frozen=True)
class Shift:
    """A change point: the series is different from ``index`` on."""

    index: int
    p_value: float


def change_points(series: list[float], *, window: int, max_pvalue: float) -> list[Shift]:
    """Every change point in the series (slower and faster), by Otava's E-Divisive means."""
    if len(series) < 4:
        return []
    # Imported here: scipy takes a third of a second to import, which `lagtrace run`
    # (no branch history) should not pay.
    from otava.analysis import compute_change_points

    found, _weak = compute_change_points(list(series), window_len=window, max_pvalue=max_pvalue)
    return [Shift(int(cp.index), float(cp.stats.pvalue)) for cp in found]


@dataclass(frozen=True)
class Step:
    """A slower change point that passed the thresholds: ``series[index:]`` is slower."""

    index: int
    p_value: float
    before: Summary
    after: Summary
    # Where the neighbouring change points are: the segments the step separates.
    segment_start: int
    segment_end: int

    @property
    def ratio(self) -> float:
        return self.after.median / self.before.median if self.before.median > 0 else float("inf")


def slower_steps(series: list[float], thresholds: Thresholds) -> list[Step]:
    """The change points after which the series is slower, by at least the thresholds."""
    shifts = change_points(series, window=thresholds.slower_since_window, max_pvalue=thresholds.slower_since_max_pvalue)
    bounds = [0, *(s.index for s in shifts), len(series)]
    steps = []
    for k, shift in enumerate(shifts):
        start, end = bounds[k], bounds[k + 2]
        before, after = series[start : shift.index], series[shift.index : end]
        if min(len(before), len(after)) < thresholds.slower_since_min_pushes:
            continue  # a lone slow job (a busy machine) is a segment of its own, not a step
        low, high = median_interval(before), median_interval(after)
        if not (
            high.median >= low.median * thresholds.slower_since_ratio
            and high.median - low.median >= thresholds.cpu_sensitivity_min_s
            and low.ci_high < high.ci_low
        ):
            continue
        steps.append(Step(shift.index, shift.p_value, low, high, start, end))
    return steps


@dataclass
class Push:
    """One commit of the branch (or one job, when it had no commit): its jobs and the
    test's timing runs in them, per configuration."""

    commit: str | None
    job_ids: list[int] = field(default_factory=list)
    durations: dict[tuple[str, str], list[float]] = field(default_factory=lambda: defaultdict(list))

    @property
    def first_job_id(self) -> int:
        return min(self.job_ids)


def branch_history(session: Session, job: Job, branch: str, thresholds: Thresholds) -> list[Push]:
    """The branch's newest finished jobs up to ``job``, grouped by commit, oldest first,
    with the timing runs of the tests ``job`` ran."""
    jobs = session.execute(
        select(Job.id, JobSource.commit_sha)
        .join(JobSource, JobSource.job_id == Job.id)
        .where(
            Job.project_id == job.project_id,
            Job.id <= job.id,
            or_(Job.status == JobStatus.done, Job.id == job.id),
            on_branch(branch),
        )
        .order_by(Job.id.desc())
        .limit(thresholds.slower_since_history)
    ).all()
    pushes: dict[str, Push] = {}
    push_of: dict[int, Push] = {}
    for job_id, commit in sorted(jobs):
        push = pushes.setdefault(commit or f"job:{job_id}", Push(commit))
        push.job_ids.append(job_id)
        push_of[job_id] = push
    tests = sorted(
        set(
            session.scalars(
                select(TestResult.test_id)
                .join(Run, Run.id == TestResult.run_id)
                .join(JobConfig, JobConfig.id == Run.config_id)
                .where(JobConfig.job_id == job.id, Run.kind.in_(TEST_HISTORY_KINDS))
                .distinct()
            )
        )
    )
    for start in range(0, len(tests), CHUNK):
        for job_id, label, test_id, duration in session.execute(
            select(JobConfig.job_id, JobConfig.label, TestResult.test_id, TestResult.duration_s)
            .select_from(TestResult)
            .join(Run, Run.id == TestResult.run_id)
            .join(JobConfig, JobConfig.id == Run.config_id)
            .where(
                JobConfig.job_id.in_(list(push_of)),
                TestResult.test_id.in_(tests[start : start + CHUNK]),
                # A surveyed suite's tests: the survey's run (every test) and the focused
                # ones, but the census's (its tracer's time is in every duration).
                Run.kind.in_(TEST_HISTORY_KINDS),
                UNTRACED,
                TestResult.outcome != "skipped",
            )
        ):
            push_of[job_id].durations[(test_id, label)].append(duration)
    return sorted(pushes.values(), key=lambda p: p.first_job_id)


def after_job(session: Session, job: Job, thresholds: Thresholds, branches: list[str]) -> list[Finding]:
    """Search the history of the job's branch for the steps it completes; store a
    slower_since finding on the first slow push's job for each step not already stored.
    Returns the new findings."""
    source = session.get(JobSource, job.id)
    branch = branch_of(source.ref, source.branch) if source is not None else ""
    if not branch or branch not in branches:
        return []
    history = branch_history(session, job, branch, thresholds)
    keys = sorted({key for push in history for key in push.durations})
    known = _known_steps(session, job.project_id, branch, sorted({test for test, _ in keys}))
    created = []
    for test_id, label in keys:
        pushes = [p for p in history if p.durations.get((test_id, label))]
        if len(pushes) < 2 * thresholds.slower_since_min_pushes:
            continue
        series = [statistics.median(p.durations[(test_id, label)]) for p in pushes]
        position = {job_id: i for i, p in enumerate(pushes) for job_id in p.job_ids}
        for step in slower_steps(series, thresholds):
            seen = [position.get(job_id) for job_id in known.get((test_id, label), [])]
            if any(i is not None and step.segment_start < i < step.segment_end for i in seen):
                continue  # found before, perhaps one push off: the same step
            finding = _finding(session, job, branch, test_id, label, pushes, step)
            created.append(finding)
            known[(test_id, label)].append(finding.job_id)
    session.flush()
    return created


def _known_steps(session: Session, project_id: int, branch: str, tests: list[str]) -> dict[tuple[str, str], list[int]]:
    """(test, configuration) -> the jobs of the first slow pushes already reported."""
    known: dict[tuple[str, str], list[int]] = defaultdict(list)
    for start in range(0, len(tests), CHUNK):
        for finding in session.scalars(
            select(Finding)
            .join(Job, Job.id == Finding.job_id)
            .where(
                Job.project_id == project_id,
                Finding.kind == KIND,
                Finding.test_id.in_(tests[start : start + CHUNK]),
            )
        ):
            stored = metrics_of(finding.kind, finding.metrics)
            on_branch = isinstance(stored, SlowerSinceMetrics) and stored.branch == branch
            if on_branch and finding.test_id and finding.config_label:
                known[(finding.test_id, finding.config_label)].append(finding.job_id)
    return known


def _short(push: Push) -> str:
    return push.commit[:12] if push.commit else f"job #{push.first_job_id}"


def _finding(
    session: Session, job: Job, branch: str, test_id: str, label: str, pushes: list[Push], step: Step
) -> Finding:
    first_slow, last_fast = pushes[step.index], pushes[step.index - 1]
    culprit = session.get(Job, first_slow.first_job_id) or job
    ratio = step.ratio
    metrics = SlowerSinceMetrics(
        branch=branch,
        ratio=ratio,
        p_value=step.p_value,
        first_slow=PushRef(commit=first_slow.commit, job_id=first_slow.first_job_id),
        last_fast=PushRef(commit=last_fast.commit, job_id=last_fast.first_job_id),
        # Medians of the per-push medians on each side, with their 95 % intervals.
        before=_side(step.before, step.index - step.segment_start),
        after=_side(step.after, step.segment_end - step.index),
        found_after_job=job.id,
        method=METHOD,
    )
    before, after = step.before, step.after
    finding = Finding(
        job=culprit,
        kind=KIND,
        severity=Severity.medium if ratio >= 1.5 else Severity.low,
        title=f"{ratio:.2f}x slower on {branch} since {_short(first_slow)} (last fast: {_short(last_fast)})",
        detail=(
            f"{METHOD} puts a change point in this test's latency on {branch} in {label} between "
            f"{_short(last_fast)} (job #{last_fast.first_job_id}, the last fast push) and {_short(first_slow)} "
            f"(job #{first_slow.first_job_id}, the first slow one), p = {step.p_value:.2g}. Median of the "
            f"pushes' medians before: {format_seconds(before.median)} (95 % interval "
            f"{format_seconds(before.ci_low)} to {format_seconds(before.ci_high)}, {metrics.before.pushes} "
            f"pushes); after: {format_seconds(after.median)} ({format_seconds(after.ci_low)} to "
            f"{format_seconds(after.ci_high)}, {metrics.after.pushes} pushes). Found after job #{job.id}. "
            "Jobs on different days may have run on different machines: screen the two commits interleaved "
            "(a pull request's base against its head) to confirm."
        ),
        config_label=label,
        test_id=test_id,
        # Stored here, not through diagnose.py: the JSON the finding keeps.
        metrics=metrics.stored(),
        evidence_ids=[],
        # One problem per step: the test, the branch and the push that made it slower
        # (another step of the same test later is another problem, triaged on its own).
        fingerprint=fingerprint(job.project.name, KIND, f"{test_id} on {branch} since {_short(first_slow)}"),
    )
    triage.carry(session, finding)
    session.add(finding)
    session.flush()
    return finding


def _side(summary: Summary, pushes: int) -> PushesMedian:
    return PushesMedian(
        median=summary.median,
        ci_low=summary.ci_low,
        ci_high=summary.ci_high,
        n=summary.n,
        confidence=summary.confidence,
        pushes=pushes,
    )
