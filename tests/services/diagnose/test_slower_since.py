"""slower_since over a branch history stored as the engine stores it: each push's job is
created, its timing runs stored (services/measure/runs.store_run) and finished through the
engine's own diagnose phase, which searches the branch for change points."""

from __future__ import annotations

import random

import pytest
from sqlalchemy import select

from services.diagnose.change_points import KIND
from services.github.client import check_run_body
from services.jobs import engine
from services.jobs.report import build_report
from services.models import Finding, JobSource, JobTask, TriageStatus
from services.settings import Settings
from tests.support.branch_history import CONFIG, STEP_AT, STEPPED, commit, push

pytestmark = pytest.mark.postgres

PUSHES = 30


@pytest.mark.parametrize("db_session", ["postgres"], indirect=True)
def test_a_planted_step_gets_one_finding_on_its_push_and_flat_tests_none(db_session):
    session, settings, rng = db_session, Settings(), random.Random(24)
    jobs = [push(session, settings, rng, n, github=n == STEP_AT) for n in range(PUSHES)]

    found = list(session.scalars(select(Finding).where(Finding.kind == KIND)))
    assert [(f.test_id, f.config_label) for f in found] == [(STEPPED, CONFIG)]  # none on the 20 flat tests
    finding = found[0]
    # Stored on the push that made it slower, naming it and the last fast one.
    assert finding.job_id == jobs[STEP_AT].id
    metrics = finding.metrics
    assert metrics["first_slow"] == {"commit": commit(STEP_AT), "job_id": jobs[STEP_AT].id}
    assert metrics["last_fast"] == {"commit": commit(STEP_AT - 1), "job_id": jobs[STEP_AT - 1].id}
    assert metrics["branch"] == "main"
    # Found once four slow pushes were in, and not again by the six jobs after.
    assert metrics["found_after_job"] == jobs[STEP_AT + 3].id
    assert 1.8 < metrics["ratio"] < 2.2
    before, after = metrics["before"], metrics["after"]
    assert before["ci_high"] < after["ci_low"]
    assert (before["pushes"], after["pushes"]) == (STEP_AT, 4)
    assert 0.18 < before["median"] < 0.22 and 0.36 < after["median"] < 0.44
    assert f"since {STEP_AT:04x}" in finding.title and f"last fast: {STEP_AT - 1:04x}" in finding.title
    assert finding.status is TriageStatus.new

    # The push's check run is sent again, now with the finding.
    tasks = session.scalars(select(JobTask.name).where(JobTask.job_id == jobs[STEP_AT].id)).all()
    assert f"notify:slower_since:{finding.fingerprint[:16]}" in tasks
    report = build_report(jobs[STEP_AT], settings.thresholds)
    assert [f.kind for f in report.findings] == [KIND]
    source = session.get(JobSource, jobs[STEP_AT].id)
    body = check_run_body(settings, jobs[STEP_AT], source, report)
    assert "slower on main since" in body["output"]["summary"]
    assert body["conclusion"] == "neutral"  # medium: open, but the default policy fails on high only


@pytest.mark.parametrize("db_session", ["postgres"], indirect=True)
def test_triage_follows_the_step_and_another_branch_is_not_watched(db_session):
    session, rng = db_session, random.Random(7)
    settings = Settings(change_point_branches=["main"])
    jobs = [push(session, settings, rng, n) for n in range(STEP_AT + 4)]
    finding = session.scalars(select(Finding).where(Finding.kind == KIND)).one()
    finding.status = TriageStatus.acknowledged
    # The push's job diagnosed again (a finish step retried) keeps it.
    engine.diagnose_phase(session, settings, jobs[STEP_AT])
    assert session.scalars(select(Finding.status).where(Finding.kind == KIND)).all() == [TriageStatus.acknowledged]
    # No branch watched: nothing is searched.
    quiet = Settings(change_point_branches=[])
    for n in range(STEP_AT + 4, PUSHES):
        push(session, quiet, rng, n)
    assert len(session.scalars(select(Finding).where(Finding.kind == KIND)).all()) == 1
