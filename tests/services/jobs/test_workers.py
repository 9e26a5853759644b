"""Live workers and lost steps, as the job's progress shows them, on SQLite and Postgres."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import select

from services.jobs import outbox, workers
from services.jobs.dispatch import PREPARE, Step
from services.jobs.ledger import claim, renew
from services.jobs.lifecycle import get_or_create_project
from services.jobs.spec import JobSpec
from services.jobs.submit import job_detail, progress, submit_job
from services.models import Worker, database_now, utcnow
from services.settings import Settings

BROKER = "redis://127.0.0.1:1/0"  # never reached: only whether jobs go to workers matters


@pytest.fixture
def session(db_session, tmp_path):
    # example.com is never cloned here: any host may be named.
    db_session.settings = Settings(work_dir=tmp_path / "work", broker_url=BROKER, repository_hosts=["*"])
    return db_session


def queued_job(session):
    job = submit_job(
        session,
        session.settings,
        get_or_create_project(session, "demo"),
        JobSpec(command=["python3", "x.py"]),
        repository_url="https://example.com/r.git",
    )
    outbox.pending(session)
    session.commit()
    return job


def identity(name: str = "host/1") -> workers.Identity:
    return workers.Identity(name=name, node="node-a", cpus="0-1", cpu_model="Test CPU", concurrency=1)


def age(session, name: str, seconds: float) -> None:
    row = session.scalar(select(Worker).where(Worker.name == name))
    row.heartbeat_at = utcnow() - dt.timedelta(seconds=seconds)
    session.commit()


def test_a_worker_is_live_while_it_beats_and_gone_once_it_leaves_or_lapses(session):
    settings = session.settings
    assert workers.live(session, settings) == []
    workers.beat(session, identity("host/1"))
    workers.beat(session, identity("host/2"))
    session.commit()
    assert {w.name for w in workers.live(session, settings)} == {"host/1", "host/2"}
    age(session, "host/2", workers.lapse_s(settings) + 1)  # kill -9: its beats stopped
    assert [w.name for w in workers.live(session, settings)] == ["host/1"]
    listed = {w["name"]: w for w in workers.listing(session, settings)}
    assert listed["host/1"]["alive"] and not listed["host/2"]["alive"]
    assert listed["host/1"]["cpus"] == "0-1" and listed["host/1"]["node"] == "node-a"
    assert listed["host/2"]["heartbeat_age_s"] > workers.lapse_s(settings)
    workers.beat(session, identity("host/2"))  # beating again: alive again, one row
    session.commit()
    assert len(workers.listing(session, settings)) == 2 and len(workers.live(session, settings)) == 2
    workers.leave(session, "host/1")  # a warm shutdown
    session.commit()
    assert [w.name for w in workers.live(session, settings)] == ["host/2"]


def test_a_worker_silent_for_a_day_is_forgotten_when_another_starts(session):
    workers.beat(session, identity("host/old"))
    session.commit()
    age(session, "host/old", workers.FORGET_AFTER.total_seconds() + 60)
    workers.beat(session, identity("host/new"))
    session.commit()
    assert [w["name"] for w in workers.listing(session, session.settings)] == ["host/new"]


def test_a_queued_job_says_when_no_worker_is_running(session):
    settings = session.settings
    job = queued_job(session)
    shown = progress(session, job, settings)
    assert shown["phase"] == "queued" and shown["warning"] == workers.NO_WORKER
    assert shown["workers_live"] == 0
    workers.beat(session, identity())
    session.commit()
    shown = progress(session, job, settings)
    assert shown["warning"] is None and shown["workers_live"] == 1
    # Without a broker the server runs jobs itself: no worker is missing.
    embedded = Settings(work_dir=settings.work_dir)
    assert progress(session, job, embedded)["warning"] is None
    # Without settings (callers that do not ask), nothing is said either way.
    assert progress(session, job)["warning"] is None


def test_a_step_whose_heartbeat_lapsed_shows_its_worker_lost(session):
    settings = session.settings
    job = queued_job(session)
    workers.beat(session, identity())
    task = claim(session, settings, Step(PREPARE, job.id, PREPARE))
    session.commit()
    assert not workers.lapsed(task, settings, database_now(session))
    assert job_detail(session, job, settings=settings)["progress"]["warning"] is None
    # Its last renewal was longer ago than a heartbeat lapses: the process is gone.
    task.lease_expires_at = utcnow() + dt.timedelta(seconds=settings.lease_s - workers.lapse_s(settings) - 1)
    session.commit()
    assert workers.lapsed(task, settings, database_now(session))
    detail = job_detail(session, job, settings=settings)
    warning = detail["progress"]["warning"]
    assert warning == f"{workers.LOST} (prepare on {task.worker})"
    [lost] = detail["progress"]["workers_lost"]
    assert lost["step"] == "prepare" and lost["silent_s"] > workers.lapse_s(settings)
    # The lease has not run out yet: the reconciler would not take the step again so soon.
    assert workers.last_beat(task, settings) + dt.timedelta(seconds=settings.lease_s) > utcnow()
    # A heartbeat that gets through again: the worker was only slow.
    assert renew(session, settings, task.id, task.worker, task.attempts)
    session.commit()
    session.refresh(task)
    assert not workers.lapsed(task, settings, database_now(session))
    assert job_detail(session, job, settings=settings)["progress"]["warning"] is None


def test_a_lost_step_and_no_worker_are_both_said(session):
    settings = session.settings
    job = queued_job(session)
    task = claim(session, settings, Step(PREPARE, job.id, PREPARE))
    task.lease_expires_at = utcnow() - dt.timedelta(seconds=1)  # every worker died with it
    session.commit()
    warning = progress(session, job, settings)["warning"]
    assert warning.startswith(workers.LOST) and warning.endswith(workers.NO_WORKER)


def test_the_lapse_is_about_one_heartbeat():
    # A worker killed right after a beat is seen lost ``lapse_s`` later: with the shipped
    # defaults within 30 s, long before its lease lapses and the step is taken again.
    assert workers.lapse_s(Settings()) < 30 < Settings().step_lease_s
    assert workers.lapse_s(Settings(heartbeat_interval_s=2, step_lease_s=10)) == 7
