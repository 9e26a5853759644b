"""The Celery app factory, its reliability settings, and the tasks.

Each task takes ids and runs one step of the job engine (services.jobs.engine, which
claims the step in the database ledger first); the outbox sends the next steps once the
step's transaction commits. Messages are
acknowledged late, so a worker that dies mid-run leaves its message to be redelivered
once the broker's visibility timeout passes; the hard time limit ends every task
before that, so a live task is never delivered twice.
"""

from __future__ import annotations

import logging
import threading

from celery import Celery
from celery.signals import worker_process_init
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from services.db import make_engine, make_session_factory
from services.jobs import engine as job_engine
from services.jobs import outbox
from services.jobs import reconcile as reconciler
from services.jobs.dispatch import FINISH, NOTIFY, PREPARE, RECONCILE, SCREEN, Step
from services.settings import Settings

log = logging.getLogger("lagtrace.worker")
QUEUE = "lagtrace"


def task_name(kind: str) -> str:
    return f"lagtrace.{kind}"


class CeleryDispatcher:
    """Sends steps as Celery messages by task name (no import of the task functions)."""

    def __init__(self, app: Celery):
        self.app = app

    def send(self, step: Step) -> None:
        self.app.send_task(task_name(step.kind), args=[step.job_id, step.task_name], queue=QUEUE)

    def problem(self) -> str | None:
        try:
            with self.app.connection_for_write() as connection:
                connection.ensure_connection(max_retries=1, timeout=2)
        except Exception as exc:  # kombu raises transport-specific errors; any means "not reachable"
            return f"broker {self.app.conf.broker_url}: {type(exc).__name__}: {exc}"
        return None


class WorkerDatabase:
    """The worker process's engine, made on first use and never shared across a fork."""

    def __init__(self, settings: Settings, dispatcher: CeleryDispatcher):
        self.settings = settings
        self.dispatcher = dispatcher
        self._engine: Engine | None = None
        self._factory: sessionmaker[Session] | None = None
        self._lock = threading.Lock()

    def session_factory(self) -> sessionmaker[Session]:
        with self._lock:
            if self._factory is None:
                self._engine = make_engine(self.settings)
                # What a task commits, the outbox sends as Celery messages.
                self._factory = outbox.bind(make_session_factory(self._engine), self.dispatcher)
            return self._factory

    def after_fork(self, **_kwargs) -> None:
        # Pooled connections inherited from the parent belong to the parent: drop them
        # without closing the parent's sockets (SQLAlchemy's advice for os.fork()).
        if self._engine is not None:
            self._engine.dispose(close=False)


def make_celery(settings: Settings) -> Celery:
    if not settings.broker_url:
        raise ValueError("LAGTRACE_BROKER_URL is not set: a Celery worker needs a broker (redis://...)")
    app = Celery("lagtrace", broker=settings.broker_url, set_as_current=False)
    app.conf.update(
        task_default_queue=QUEUE,
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        task_acks_late=True,
        # A worker killed mid-task (OOM, node lost) must not ack: the message comes back.
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        # One measured run per node by default (DESIGN.md section 8).
        worker_concurrency=1,
        task_soft_time_limit=settings.task_soft_time_limit_s,
        task_time_limit=settings.task_time_limit_s,
        broker_transport_options={"visibility_timeout": settings.broker_visibility_timeout_s},
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        beat_schedule={
            "reconcile": {
                "task": task_name(RECONCILE),
                "schedule": settings.reconcile_interval_s,
                "options": {"queue": QUEUE, "expires": settings.reconcile_interval_s},
            }
        },
    )
    database = WorkerDatabase(settings, CeleryDispatcher(app))
    worker_process_init.connect(database.after_fork, weak=False)

    def step_task(kind: str):
        # One task per step, so that steps can be routed and rate-limited apart; the body
        # is the same: ids in, one engine step (which commits; the outbox sends what follows).
        def task(job_id: int, name: str) -> None:
            job_engine.run_step(database.session_factory(), settings, Step(kind, job_id, name))

        task.__name__ = task.__qualname__ = kind
        return app.task(name=task_name(kind))(task)

    for kind in (PREPARE, SCREEN, FINISH, NOTIFY):
        step_task(kind)

    @app.task(name=task_name(RECONCILE))
    def reconcile() -> None:
        with database.session_factory()() as session:
            steps = reconciler.reconcile(session, settings)
            session.commit()  # the outbox resends them
        if steps:
            log.info("reconciler resent %d steps", len(steps))

    return app
