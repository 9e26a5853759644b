"""slower_since over a branch history stored as the engine stores it: each push's job is
created, its timing runs stored (services/measure/runs.store_run) and finished through the
engine's own diagnose phase, which searches the branch for change points."""

from __future__ import annotations

import random

import pytest
from sqlalchemy import select

from services.diagnose.change_points import KIND
from services.github.client import check_run_body
from services.jobs import engine, lifecycle
from services.jobs.report import build_report
from services.measure.configs import CpuConfig
from services.measure.executors.base import RunResult
from services.measure.pytest_command import TestCase
from services.measure.runs import store_run
from services.models import Finding, Job, JobSource, JobTask, RunKind, TriageStatus
from services.settings import Settings

pytestmark = pytest.mark.postgres

STEPPED = "tests/test_api.py::test_search"
FLAT = [f"tests/test_api.py::test_flat_{i:02d}" for i in range(20)]
PUSHES = 30
STEP_AT = 20  # the 21st push makes STEPPED 2x slower
CONFIG = "cpuset=0"


def _result(wall: float) -> RunResult:
    return RunResult(
        wall_s=wall,
        user_s=wall * 0.9,
        sys_s=0.01,
        max_rss_kb=30000,
        voluntary_ctx_switches=100,
        involuntary_ctx_switches=5,
        exit_code=0,
        timed_out=False,
        nr_periods=None,
        nr_throttled=None,
        throttled_s=None,
        output_tail=None,
    )


def _push(session, settings: Settings, rng: random.Random, push: int, *, github: bool = False) -> Job:
    """One push of main: a job measuring every test 5 times, finished by the engine."""
    job = lifecycle.create_job(
        session,
        project="shop",
        command=["python3", "-m", "pytest", "tests"],
        configs=[CpuConfig(CONFIG, cpuset=(0,))],
        executor="docker",
        workdir=None,
        repeat=5,
        timeout_s=None,
        source="api",
    )
    session.add(
        JobSource(
            job_id=job.id,
            kind="git",
            repository_url="https://example.invalid/shop.git",
            ref="refs/heads/main",
            commit_sha=f"{push:04x}" * 10,
            github_repository="acme/shop" if github else None,
            github_head_sha=f"{push:04x}" * 10 if github else None,
        )
    )
    lifecycle.mark_running(job)
    # Ordinary noise: each push's job runs on a machine a few per cent faster or slower,
    # and each run varies by 5 %.
    machine = 1 + rng.gauss(0, 0.03)
    for repetition in range(1, 6):
        cases = [
            TestCase(STEPPED, 0.2 * (2.0 if push >= STEP_AT else 1.0) * machine * (1 + rng.gauss(0, 0.05)), "passed")
        ]
        cases += [
            TestCase(test, (0.05 + 0.01 * k) * machine * (1 + rng.gauss(0, 0.05)), "passed")
            for k, test in enumerate(FLAT)
        ]
        store_run(session, job.configs[0], RunKind.timing, repetition, _result(sum(c.duration_s for c in cases)), cases)
    engine.diagnose_phase(session, settings, job)
    session.flush()
    return job


@pytest.mark.parametrize("db_session", ["postgres"], indirect=True)
def test_a_planted_step_gets_one_finding_on_its_push_and_flat_tests_none(db_session):
    session, settings, rng = db_session, Settings(), random.Random(24)
    jobs = [_push(session, settings, rng, push, github=push == STEP_AT) for push in range(PUSHES)]

    found = list(session.scalars(select(Finding).where(Finding.kind == KIND)))
    assert [(f.test_id, f.config_label) for f in found] == [(STEPPED, CONFIG)]  # none on the 20 flat tests
    finding = found[0]
    # Stored on the push that made it slower, naming it and the last fast one.
    assert finding.job_id == jobs[STEP_AT].id
    metrics = finding.metrics
    assert metrics["first_slow"] == {"commit": f"{STEP_AT:04x}" * 10, "job_id": jobs[STEP_AT].id}
    assert metrics["last_fast"] == {"commit": f"{STEP_AT - 1:04x}" * 10, "job_id": jobs[STEP_AT - 1].id}
    assert metrics["branch"] == "main"
    # Found once three slow pushes were in, and not again by the seven jobs after.
    assert metrics["found_after_job"] == jobs[STEP_AT + 2].id
    assert 1.8 < metrics["ratio"] < 2.2
    before, after = metrics["before"], metrics["after"]
    assert before["ci_high"] < after["ci_low"]
    assert (before["pushes"], after["pushes"]) == (STEP_AT, 3)
    assert 0.18 < before["median"] < 0.22 and 0.36 < after["median"] < 0.44
    assert f"since {STEP_AT:04x}" in finding.title and f"last fast: {STEP_AT - 1:04x}" in finding.title
    assert finding.status is TriageStatus.new

    # The push's check run is sent again, now with the finding.
    tasks = session.scalars(select(JobTask.name).where(JobTask.job_id == jobs[STEP_AT].id)).all()
    assert f"notify:slower_since:{finding.fingerprint[:16]}" in tasks
    report = build_report(jobs[STEP_AT], settings.thresholds)
    assert [f["kind"] for f in report["findings"]] == [KIND]
    source = session.get(JobSource, jobs[STEP_AT].id)
    body = check_run_body(settings, jobs[STEP_AT], source, report)
    assert "slower on main since" in body["output"]["summary"]
    assert body["conclusion"] == "neutral"  # medium: open, but the default policy fails on high only


@pytest.mark.parametrize("db_session", ["postgres"], indirect=True)
def test_triage_follows_the_step_and_another_branch_is_not_watched(db_session):
    session, rng = db_session, random.Random(7)
    settings = Settings(change_point_branches=["main"])
    jobs = [_push(session, settings, rng, push) for push in range(STEP_AT + 3)]
    finding = session.scalars(select(Finding).where(Finding.kind == KIND)).one()
    finding.status = TriageStatus.acknowledged
    # The push's job diagnosed again (a finish step retried) keeps it.
    engine.diagnose_phase(session, settings, jobs[STEP_AT])
    assert session.scalars(select(Finding.status).where(Finding.kind == KIND)).all() == [TriageStatus.acknowledged]
    # No branch watched: nothing is searched.
    quiet = Settings(change_point_branches=[])
    for push in range(STEP_AT + 3, PUSHES):
        _push(session, quiet, rng, push)
    assert len(session.scalars(select(Finding).where(Finding.kind == KIND)).all()) == 1
