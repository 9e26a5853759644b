"""A step that the Docker engine interrupts: given back uncounted only when the engine had
stopped answering; when it kept answering (a 5xx, a container killed from outside) the
attempt counts, so a cause that repeats ends the job with its reason instead of looping.

Real SQLite and the real engine (wait_for_engine pings it, the attempt's containers are
looked for): the step's handler is the only stand-in, raising what the executor raises."""

from __future__ import annotations

import datetime as dt
import shutil

import pytest
from sqlalchemy import select

from services.db import make_engine, make_session_factory
from services.errors import EngineUnavailable
from services.jobs import outbox
from services.jobs.lease import Drained, run_step
from services.jobs.lifecycle import get_or_create_project
from services.jobs.spec import JobSpec
from services.jobs.submit import submit_job
from services.measure.executors.docker_engine import unavailable_reason
from services.models import Job, JobStatus, JobTask, TaskState, utcnow
from services.settings import Settings
from tests.conftest import require

KILLED = "the run's container in cpuset=0 was killed from outside the command"


@pytest.fixture
def session_factory(tmp_path, migrated_sqlite):
    path = tmp_path / "lagtrace.db"
    shutil.copy(migrated_sqlite, path)
    settings = Settings(database_url=f"sqlite:///{path}")
    problem = unavailable_reason(settings.docker_image)
    require(problem is None, f"the lease asks the real Docker engine whether it is back: {problem}")
    engine = make_engine(settings)
    yield make_session_factory(engine)
    engine.dispose()


def settings_for(tmp_path, **overrides) -> Settings:
    return Settings(
        database_url=f"sqlite:///{tmp_path / 'lagtrace.db'}",
        work_dir=tmp_path / "work",
        repository_hosts=["*"],
        docker_engine_wait_s=5,
        **overrides,
    )


def queued_step(session_factory, settings):
    with session_factory() as session:
        job = submit_job(
            session,
            settings,
            get_or_create_project(session, "demo"),
            JobSpec(command=["python3", "x.py"]),
            repository_url="https://example.com/r.git",
        )
        [step] = outbox.pending(session)
        session.commit()
        return job.id, step


def task_of(session_factory, job_id: int) -> tuple[JobTask, Job]:
    with session_factory() as session:
        task = session.scalar(select(JobTask).where(JobTask.job_id == job_id, JobTask.name == "prepare"))
        job = session.get(Job, job_id)
        session.expunge_all()
        return task, job


def due_now(session_factory, job_id: int) -> None:
    """What the reconciler waits for: the postponed step's time has come."""
    with session_factory() as session:
        task = session.scalar(select(JobTask).where(JobTask.job_id == job_id, JobTask.name == "prepare"))
        task.lease_expires_at = utcnow() - dt.timedelta(seconds=1)
        session.commit()


def raising(exc: EngineUnavailable):
    def handler(session, settings, task):
        raise exc

    return {"prepare": handler}


def test_a_container_killed_while_the_engine_answers_counts_until_the_job_fails(session_factory, tmp_path):
    settings = settings_for(tmp_path, task_max_attempts=2)
    job_id, step = queued_step(session_factory, settings)
    handlers = raising(EngineUnavailable(KILLED, answered=True))
    run_step(session_factory, settings, step, handlers)
    task, job = task_of(session_factory, job_id)
    assert task.state is TaskState.pending and task.attempts == 1, (task.state, task.attempts)
    assert KILLED in (task.error or "") and job.status is not JobStatus.failed
    due_now(session_factory, job_id)
    run_step(session_factory, settings, step, handlers)
    task, job = task_of(session_factory, job_id)
    assert job.status is JobStatus.failed, (job.status, task.state, task.attempts)
    assert KILLED in job.error and "in 2 attempts; giving up" in job.error, job.error


def test_an_engine_that_stopped_answering_and_came_back_costs_no_attempt(session_factory, tmp_path):
    settings = settings_for(tmp_path, task_max_attempts=2)
    job_id, step = queued_step(session_factory, settings)
    handlers = raising(EngineUnavailable("the Docker engine's stream of the run in cpuset=0 broke off"))
    for _ in range(3):  # more often than the attempts allow: none of them is counted
        run_step(session_factory, settings, step, handlers)
        task, job = task_of(session_factory, job_id)
        assert task.attempts == 0 and job.status is not JobStatus.failed, (task.attempts, job.status, job.error)


def broken_on_the_way_out(signal_exception: BaseException):
    """What a signal leaves when it strikes inside the threading module (a Thread being
    started under a Condition): its exception, then ``release unlocked lock`` raised while
    handling it, seen in CI when a drain and billiard's SystemExit reached one pool process."""

    def handler(session, settings, task):
        try:
            raise signal_exception
        except BaseException:
            raise RuntimeError("release unlocked lock")  # noqa: B904 - as threading raises it

    return {"prepare": handler}


def test_a_drain_that_breaks_a_lock_on_its_way_out_still_gives_the_step_back(session_factory, tmp_path):
    settings = settings_for(tmp_path, task_max_attempts=1)
    job_id, step = queued_step(session_factory, settings)
    run_step(session_factory, settings, step, broken_on_the_way_out(Drained()))
    task, job = task_of(session_factory, job_id)
    assert task.state is TaskState.pending and task.attempts == 0, (task.state, task.attempts)
    assert job.status is not JobStatus.failed and not job.error, (job.status, job.error)


def test_a_warm_shutdown_that_breaks_a_lock_records_no_failure(session_factory, tmp_path):
    settings = settings_for(tmp_path, task_max_attempts=1)
    job_id, step = queued_step(session_factory, settings)
    with pytest.raises(SystemExit):
        run_step(session_factory, settings, step, broken_on_the_way_out(SystemExit(-241)))
    task, job = task_of(session_factory, job_id)
    # Left leased, as a worker that died mid-step leaves it: the reconciler re-leases it.
    assert task.state is TaskState.running and task.attempts == 1, (task.state, task.attempts)
    assert job.status is not JobStatus.failed and not job.error, (job.status, job.error)
