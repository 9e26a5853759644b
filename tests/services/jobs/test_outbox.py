"""The outbox: a step recorded in a transaction reaches the dispatcher after commit, never
before, and never when the transaction rolls back."""

from __future__ import annotations

import queue

import pytest
from sqlalchemy import select

from services import migrate
from services.db import make_engine, make_session_factory
from services.jobs import outbox
from services.jobs.dispatch import PREPARE, InProcessDispatcher, Step
from services.jobs.lifecycle import get_or_create_project
from services.jobs.spec import JobSpec
from services.jobs.submit import submit_job
from services.models import JobTask
from services.settings import Settings
from worker import CeleryDispatcher, make_celery


@pytest.fixture
def received():
    """What the in-process job thread was handed, in order."""
    steps: queue.Queue[Step] = queue.Queue()
    dispatcher = InProcessDispatcher(steps.put).start()
    yield dispatcher, steps
    dispatcher.stop(timeout=5)


@pytest.fixture
def sessions(database_url, tmp_path, received):
    settings = Settings(database_url=database_url, work_dir=tmp_path / "work", repository_hosts=["*"])
    migrate.upgrade(settings)
    engine = make_engine(settings)
    factory = outbox.bind(make_session_factory(engine), received[0])
    yield factory, settings
    engine.dispose()


def submit(session, settings):
    return submit_job(
        session,
        settings,
        get_or_create_project(session, "demo"),
        JobSpec(command=["python3", "x.py"]),
        repository_url="https://example.com/r.git",
    )


def test_a_step_is_sent_only_once_its_transaction_commits(sessions, received):
    factory, settings = sessions
    _, steps = received
    with factory() as session:
        job = submit(session, settings)
        assert outbox.pending(session) == [Step(PREPARE, job.id, "prepare")]
        with pytest.raises(queue.Empty):
            steps.get(timeout=0.3)  # flushed, not committed: a worker would find no row
        session.commit()
        assert steps.get(timeout=5) == Step(PREPARE, job.id, "prepare")
        assert outbox.pending(session) == []
        session.commit()  # nothing is sent twice
    with pytest.raises(queue.Empty):
        steps.get(timeout=0.3)


def test_a_released_savepoint_sends_nothing_before_the_transaction_commits(sessions, received):
    """SQLAlchemy fires after_commit when a savepoint is released: a step recorded before
    or inside one still waits for the outermost commit (the finish step's catalogue refresh
    and the scheduled matrix jobs' pass release savepoints after recording steps)."""
    factory, settings = sessions
    _, steps = received
    with factory() as session:
        before = submit(session, settings)
        with session.begin_nested():
            inside = submit(session, settings)
        with pytest.raises(queue.Empty):
            steps.get(timeout=0.3)
        assert outbox.pending(session) == [Step(PREPARE, before.id, "prepare"), Step(PREPARE, inside.id, "prepare")]
        session.commit()
        assert {steps.get(timeout=5), steps.get(timeout=5)} == {
            Step(PREPARE, before.id, "prepare"),
            Step(PREPARE, inside.id, "prepare"),
        }


def test_a_rolled_back_step_is_never_sent(sessions, received):
    factory, settings = sessions
    _, steps = received
    with factory() as session:
        submit(session, settings)
        session.rollback()
        assert outbox.pending(session) == []
        session.commit()  # a later, empty commit does not send what was rolled back
    with factory() as session:
        submit(session, settings)
        # Closed without a commit (a request that failed): dropped too.
    with factory() as session:
        assert session.scalar(select(JobTask)) is None
    with pytest.raises(queue.Empty):
        steps.get(timeout=0.3)


def test_a_send_that_fails_leaves_the_step_to_the_reconciler(database_url, tmp_path, caplog):
    settings = Settings(database_url=database_url, work_dir=tmp_path / "work", repository_hosts=["*"])
    migrate.upgrade(settings)
    engine = make_engine(settings)
    # A real Celery dispatcher whose broker does not answer: its send raises.
    unreachable = CeleryDispatcher(make_celery(Settings(broker_url="redis://127.0.0.1:1/0")))
    factory = outbox.bind(make_session_factory(engine), unreachable)
    try:
        with factory() as session:
            job = submit(session, settings)
            session.commit()  # does not raise: the row is committed
        assert "could not queue prepare" in caplog.text
        with factory() as session:
            task = session.scalar(select(JobTask).where(JobTask.job_id == job.id))
            assert task is not None and task.name == "prepare"
    finally:
        engine.dispose()
