"""A change point in a branch's history starts a bisect between its last fast and first
slow commit, once, from the job whose completion found it (services/jobs/bisect_jobs.py
bisect_regressions; the gate's case, through the service: tests/api/test_bisect_pushes.py)."""

from __future__ import annotations

import random

import pytest
from sqlalchemy import select

from services.models import Bisect, Job, Project
from services.settings import Settings
from tests.support.branch_history import CONFIG, STEP_AT, STEPPED, commit, push

PUSHES = STEP_AT + 6


def _history(session, *, bisect_regressions: bool | None) -> list[Job]:
    settings, rng = Settings(), random.Random(24)
    jobs = [push(session, settings, rng, 0)]
    project = session.scalar(select(Project).where(Project.name == "shop"))
    project.repository_url = "https://github.com/acme/shop.git"  # registered: its commits can be fetched
    return jobs + [push(session, settings, rng, n, bisect_regressions=bisect_regressions) for n in range(1, PUSHES)]


@pytest.mark.parametrize("db_session", ["postgres"], indirect=True)
def test_a_change_point_is_bisected_once_between_its_last_fast_and_first_slow_commit(db_session):
    jobs = _history(db_session, bisect_regressions=None)
    [bisect] = db_session.scalars(select(Bisect)).all()
    assert (bisect.test_id, bisect.good, bisect.bad) == (STEPPED, commit(STEP_AT - 1), commit(STEP_AT))
    # Found once four slow pushes were in (tests/services/diagnose/test_slower_since.py).
    finder = jobs[STEP_AT + 3]
    assert bisect.started_by_job_id == finder.id
    bisect_job = db_session.get(Job, bisect.job_id)
    assert bisect_job.trigger == "regression" and [c.label for c in bisect_job.configs] == [CONFIG]
    [note] = [note for note in finder.notes if note.startswith("bisect job")]
    assert f"a change point on main: which commit of {commit(STEP_AT - 1)[:10]}..{commit(STEP_AT)[:10]}" in note
    assert STEPPED in note and CONFIG in note


@pytest.mark.parametrize("db_session", ["postgres"], indirect=True)
def test_bisect_regressions_false_starts_none(db_session):
    _history(db_session, bisect_regressions=False)
    assert db_session.scalars(select(Bisect)).all() == []


@pytest.mark.parametrize("db_session", ["postgres"], indirect=True)
def test_a_bisect_the_server_refuses_leaves_a_note_and_the_job_done(db_session):
    settings, rng = Settings(), random.Random(24)
    push(db_session, settings, rng, 0)
    project = db_session.scalar(select(Project).where(Project.name == "shop"))
    project.repository_url = "https://example.invalid/shop.git"  # a host LAGTRACE_REPOSITORY_HOSTS does not allow
    jobs = [push(db_session, settings, rng, n) for n in range(1, PUSHES)]
    assert db_session.scalars(select(Bisect)).all() == []
    finder = jobs[STEP_AT + 3 - 1]
    assert finder.status.value == "done"
    [note] = [note for note in finder.notes if note.startswith("no bisect")]
    assert f"no bisect of {STEPPED} in {CONFIG}: repository.url: the host example.invalid" in note
