"""A branch whose pushes are gated between matrix jobs, and a test that fails in some of
their runs: the test catalogue's trend must show every job and mark each failure, never
draw the time to fail as latency."""

from __future__ import annotations

import datetime as dt

from sqlalchemy.orm import Session

from services.jobs.lifecycle import get_or_create_project
from services.models import Job, JobConfig, JobKind, JobSource, JobStatus, Run, RunKind, TestResult, utcnow
from services.settings import Settings
from tests.web.sample_data import TEST_SLOW, TEST_STEADY, store_handoff_job

# What a failing run of TEST_SLOW takes: its failure's time, far below its latency (1.9 s).
FAILED_S = 0.012
GATE_LABEL = "cpuset=0-1"  # the widest configuration, as a gate runs the suite


def store_gate_job(
    session: Session, project: str, created_at: dt.datetime, slow_s: list[float], slow_outcomes: list[str]
) -> Job:
    """A finished gate job on main: its run of the suite (repetition 0) and narrowed reruns
    of TEST_SLOW, each with the duration and outcome given."""
    job = Job(
        project=get_or_create_project(session, project),
        kind=JobKind.gate,
        status=JobStatus.done,
        source="webhook",
        trigger="push",
        command=["python3", "-m", "pytest", "tests/test_ws.py"],
        executor="docker",
        repeat=1,
        created_at=created_at,
        started_at=utcnow(),
        finished_at=utcnow(),
    )
    config = JobConfig(position=0, label=GATE_LABEL, cpuset="0-1")
    job.configs = [config]
    session.add(job)
    session.flush()
    session.add(
        JobSource(
            job_id=job.id,
            kind="git",
            repository_url="file:///nowhere/demo",
            commit_sha="cd" * 20,
            ref="refs/heads/main",
        )
    )
    for repetition, (seconds, outcome) in enumerate(zip(slow_s, slow_outcomes, strict=True)):
        run = Run(
            kind=RunKind.gate,
            repetition=repetition,
            wall_s=seconds + 0.3,
            user_s=seconds,
            sys_s=0.05,
            max_rss_kb=30000,
            voluntary_ctx_switches=1200,
            involuntary_ctx_switches=40,
            exit_code=0 if outcome == "passed" else 1,
        )
        run.test_results = [TestResult(test_id=TEST_SLOW, duration_s=seconds, outcome=outcome)]
        if repetition == 0:  # the suite's run has every test; the reruns only the one outside its history
            run.test_results.append(TestResult(test_id=TEST_STEADY, duration_s=0.010, outcome="passed"))
        config.runs.append(run)
    session.flush()
    return job


def fail_slow_test(job: Job, label: str, runs: int) -> None:
    """TEST_SLOW failed in the first ``runs`` timing runs of ``job`` in ``label``, in FAILED_S."""
    config = next(c for c in job.configs if c.label == label)
    for run in [r for r in config.runs if r.kind is RunKind.timing][:runs]:
        for result in run.test_results:
            if result.test_id == TEST_SLOW:
                result.outcome, result.duration_s = "failed", FAILED_S


def store_gated_branch(session: Session, settings: Settings, project: str = "demo") -> dict[str, list[int]]:
    """On main, oldest first: a matrix job, two gates, a matrix job in which TEST_SLOW failed
    in 2 of its 5 runs on two cores, a gate in which it failed in every run, and a gate in
    which it passed. Returns the matrix and gate jobs' ids, and the jobs with a failure."""
    start = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    day = dt.timedelta(days=1)
    matrix, gates, failed = [], [], []

    def matrix_job(n: int) -> Job:
        job = store_handoff_job(session, settings, project=project, created_at=start + n * day)
        source = session.get(JobSource, job.id)
        assert source is not None
        source.ref = "refs/heads/main"
        matrix.append(job.id)
        return job

    def gate_job(n: int, slow_s: list[float], outcomes: list[str]) -> Job:
        job = store_gate_job(session, project, start + n * day, slow_s, outcomes)
        gates.append(job.id)
        return job

    matrix_job(0)
    gate_job(1, [1.85], ["passed"])
    gate_job(2, [1.95, 1.90], ["passed", "passed"])
    flaky = matrix_job(3)
    fail_slow_test(flaky, GATE_LABEL, 2)
    failed.append(flaky.id)
    failed.append(gate_job(4, [FAILED_S, FAILED_S], ["failed", "failed"]).id)
    gate_job(5, [1.88], ["passed"])
    session.flush()
    return {"matrix": matrix, "gates": gates, "failed": failed}
