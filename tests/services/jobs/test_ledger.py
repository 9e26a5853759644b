"""The task ledger: claims, the reconciler, and tokens, on SQLite and Postgres."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import func, select

from services.accounts.tokens import Unauthorized, authenticate, create_token
from services.jobs import outbox
from services.jobs.dispatch import PREPARE, Step
from services.jobs.ledger import claim, release, renew, worker_name
from services.jobs.lifecycle import get_or_create_project
from services.jobs.reconcile import reconcile
from services.jobs.spec import JobSpec
from services.jobs.submit import submit_job
from services.models import ApiToken, Job, JobStatus, JobTask, TaskState, utcnow
from services.settings import Settings


@pytest.fixture
def session(db_session, tmp_path):
    # The settings the steps read (leases, attempts); the database is db_session's.
    # example.com is never cloned here: any host may be named.
    db_session.settings = Settings(work_dir=tmp_path / "work", repository_hosts=["*"])
    return db_session


def queued_job(session):
    project = get_or_create_project(session, "demo")
    job = submit_job(
        session,
        session.settings,
        project,
        JobSpec(command=["python3", "x.py"]),
        repository_url="https://example.com/r.git",
    )
    steps = outbox.pending(session)
    session.commit()
    return job, steps


def expire(session, task):
    task.lease_expires_at = utcnow() - dt.timedelta(seconds=1)
    session.commit()


def test_a_step_is_claimed_once_while_its_lease_lasts(session):
    job, [step] = queued_job(session)
    assert step == Step(PREPARE, job.id, "prepare")
    task = claim(session, session.settings, step)
    session.commit()
    assert task.state is TaskState.running and task.attempts == 1
    assert claim(session, session.settings, step) is None  # a duplicate message does nothing
    expire(session, task)
    assert claim(session, session.settings, step) is task  # a dead holder's step is taken over
    assert task.attempts == 2


def test_the_reconciler_resends_expired_steps_and_gives_up_after_the_last_attempt(session):
    settings = session.settings
    job, [step] = queued_job(session)
    assert reconcile(session, settings) == []  # leases still run: nothing to do
    task = claim(session, settings, step)
    session.commit()
    for _attempt in range(settings.task_max_attempts - 1):
        expire(session, task)
        assert reconcile(session, settings) == [step]
        session.commit()
        assert task.state is TaskState.pending
        assert claim(session, settings, step) is task
        session.commit()
    expire(session, task)
    assert reconcile(session, settings) == []
    session.commit()
    assert task.state is TaskState.failed and job.status is JobStatus.failed
    assert "never finished" in job.error


def test_a_heartbeat_renews_only_the_holders_lease(session):
    settings = session.settings
    _job, [step] = queued_job(session)
    task = claim(session, settings, step)
    session.commit()
    expire(session, task)
    assert renew(session, settings, task.id, worker_name(settings), task.attempts)
    session.commit()
    session.refresh(task)
    assert task.lease_expires_at.replace(tzinfo=dt.UTC) > utcnow()
    assert reconcile(session, settings) == []  # a beating step is not resent
    # A stale holder (an earlier attempt, another worker) renews nothing.
    assert not renew(session, settings, task.id, worker_name(settings), task.attempts - 1)
    assert not renew(session, settings, task.id, "elsewhere/1", task.attempts)


def test_a_step_given_back_in_an_outage_keeps_its_attempt_and_is_sent_again(session):
    settings = session.settings
    _job, [step] = queued_job(session)
    task = claim(session, settings, step)
    session.commit()
    assert not release(session, settings, step, "elsewhere/1", task.attempts)  # not its holder
    assert outbox.pending(session) == []
    assert release(session, settings, step, worker_name(settings), task.attempts)
    assert outbox.pending(session) == [step]
    session.commit()
    assert task.state is TaskState.pending and task.attempts == 0


def test_orphaned_steps_are_resent_when_the_embedded_server_restarts(session):
    _job, [step] = queued_job(session)
    claim(session, session.settings, step)
    session.commit()
    assert reconcile(session, session.settings, orphaned=True) == [step]


def test_steps_of_finished_jobs_are_dropped(session):
    job, [_step] = queued_job(session)
    job.status = JobStatus.cancelled
    expire(session, session.scalar(select(JobTask)))
    assert reconcile(session, session.settings) == []
    assert session.scalar(select(JobTask)).state is TaskState.cancelled


def test_tokens_are_stored_hashed_and_authenticate_their_project(session):
    token = create_token(session, "demo", "ci")
    session.commit()
    stored = session.scalar(select(ApiToken))
    assert token not in (stored.token_hash, stored.prefix) and len(stored.token_hash) == 64
    caller = authenticate(session, f"Bearer {token}")
    assert caller.project.name == "demo" and caller.token_name == "ci"
    for header in (None, "", token, f"Bearer {token}x", f"Basic {token}"):
        with pytest.raises(Unauthorized):
            authenticate(session, header)
    stored.revoked_at = utcnow()
    with pytest.raises(Unauthorized):
        authenticate(session, f"Bearer {token}")


@pytest.mark.parametrize("attempt", [1, 2])
def test_each_test_starts_on_the_migrated_database_with_nothing_left_behind(session, attempt):
    # Run twice: the second sees the first's committed job only if the rollback failed.
    assert session.scalar(select(func.count()).select_from(Job)) == 0
    queued_job(session)
    assert session.scalar(select(func.count()).select_from(Job)) == 1
