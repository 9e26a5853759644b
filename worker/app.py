"""The Celery app factory, its reliability settings, and the tasks.

Each task takes ids and runs one step of the job engine (services/steps.py, which
claims the step in the database ledger first); the outbox sends the next steps once the
step's transaction commits. Messages are
acknowledged late, so a worker that dies mid-run leaves its message to be redelivered
once the broker's visibility timeout passes; the hard time limit ends every task
before that, so a live task is never delivered twice.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar

from celery import Celery, bootsteps
from celery.beat import Scheduler
from celery.exceptions import SecurityWarning
from celery.signals import worker_process_init, worker_shutting_down
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from services import steps
from services.db import make_engine, make_session_factory
from services.jobs import outbox, sources
from services.jobs import reconcile as reconciler
from services.jobs import workers as registry
from services.jobs.dispatch import BISECT, FINISH, NOTIFY, PREPARE, RECONCILE, SCREEN, Step
from services.jobs.lease import drain
from services.settings import Settings

log = logging.getLogger("lagtrace.worker")
# Measurement work (prepare, screen, finish, bisect): one task at a time per worker, hours long.
QUEUE = "lagtrace"
# Light work (the reconciler): seconds long, and served by every worker's own light pool
# (cli/service.py), so it never waits behind a screen; behind one, the reconciler's message
# expired unrun and a killed step waited for the backlog to drain.
LIGHT_QUEUE = "light"
LIGHT_KINDS = frozenset({RECONCILE})
# GitHub check runs: a pool of their own beside the light one, because each GitHub call
# may wait up to 10 s per socket operation; sharing the light pool, a GitHub outage held
# the reconciler about 5 s per queued check run.
CHECKS_QUEUE = "checks"
CHECK_KINDS = frozenset({NOTIFY})
# How often the heartbeat file is touched; a probe allows several missed beats.
HEARTBEAT_INTERVAL_S = 5.0


def task_name(kind: str) -> str:
    return f"lagtrace.{kind}"


def queue_for(kind: str) -> str:
    if kind in LIGHT_KINDS:
        return LIGHT_QUEUE
    return CHECKS_QUEUE if kind in CHECK_KINDS else QUEUE


class CeleryDispatcher:
    """Sends steps as Celery messages by task name (no import of the task functions)."""

    def __init__(self, app: Celery):
        self.app = app

    def send(self, step: Step) -> None:
        self.app.send_task(task_name(step.kind), args=[step.job_id, step.task_name], queue=queue_for(step.kind))

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


class ReconcilePasses:
    """One reconciler pass at a time in this process, and none within ``min_gap_s`` of the
    last one that finished: the messages beat sent while no worker was up arrive together,
    and one pass does what all of them ask."""

    def __init__(self, min_gap_s: float):
        self.min_gap_s = min_gap_s
        self._lock = threading.Lock()
        self._finished: float | None = None

    @contextmanager
    def due(self) -> Iterator[bool]:
        with self._lock:
            recent = self._finished is not None and time.monotonic() - self._finished < self.min_gap_s
            if recent:
                yield False
                return
            yield True
            self._finished = time.monotonic()  # a pass that raised is not done: the next one runs


def _touch(path: Path) -> None:
    try:
        path.touch()
    except OSError:
        # A full or vanished volume must not kill the worker mid-run; the probe's
        # stale file says what went wrong.
        log.warning("could not touch the heartbeat file %s", path, exc_info=True)


class Registration(bootsteps.StartStopStep):
    """Keeps this worker's row in the database fresh (services/jobs/workers.py), idle or
    busy, from a thread of the main process: the service knows which workers are alive
    from the database, the record, not from the broker. A worker stopping on purpose
    removes its row; one killed leaves it to lapse.

    A thread rather than the worker's timer: a database that hangs must not stall the
    main loop (the liveness probe's heartbeat would go stale and the pod restart, which
    cures nothing). Its beats are every Settings.heartbeat_interval_s, as a step's are.

    Started after the pool: a thread busy in its first beat (importing the database
    driver, connecting) while the pool forks its processes leaves the child a copy of
    the locks it held, and the child's first task then waits on them for ever. Without
    ``requires``, Celery's boot order (set iteration: it changes with the hash seed) often
    put this step before the pool: a worker of the chaos and shard tests took a step and
    never ran it (https://docs.celeryq.dev/en/stable/userguide/extending.html#blueprints;
    tests/worker/test_app.py reads the order under fixed seeds).
    """

    requires: ClassVar = {"celery.worker.components:Pool"}

    def __init__(self, parent, **kwargs):
        super().__init__(parent, **kwargs)
        self.settings: Settings | None = parent.app.conf.get("lagtrace_settings")
        self.concurrency = parent.concurrency or 1
        self.identity: registry.Identity | None = None
        self._engine: Engine | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        parent.lagtrace_registration = self

    def start(self, parent) -> None:
        if self.settings is None:
            return
        self.identity = registry.Identity.here(self.settings, self.concurrency)
        self._engine = make_engine(self.settings, pool_size=1)
        # Pool processes forked from this one must not use (or close) its connection.
        worker_process_init.connect(self._after_fork, weak=False)
        # The first beat here, on the main thread: the driver's lazy imports are done
        # before the thread exists, so a pool process forked later (one replacing a child
        # that died) inherits no lock a beat in flight holds.
        self._beat_once()
        self._thread = threading.Thread(target=self._loop, name="lagtrace-worker-heartbeat", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        """False once its thread died: the liveness heartbeat then goes stale too."""
        return self._thread is None or self._thread.is_alive()

    def beat(self) -> None:
        assert self._engine is not None and self.identity is not None
        with Session(self._engine) as session:
            registry.beat(session, self.identity)
            session.commit()

    def _beat_once(self) -> None:
        try:
            self.beat()
        except Exception as exc:
            # The database is away: the row lapses and the next beat brings it back.
            log.warning("worker heartbeat missed: %s: %s", type(exc).__name__, exc)

    def _loop(self) -> None:
        assert self.settings is not None
        while not self._stop.wait(self.settings.heartbeat_interval_s):
            self._beat_once()

    def _after_fork(self, **_kwargs) -> None:
        if self._engine is not None:
            self._engine.dispose(close=False)

    def stop(self, parent) -> None:
        if self._thread is None or self._engine is None or self.identity is None:
            return
        self._stop.set()
        self._thread.join(timeout=15)
        try:
            with Session(self._engine) as session:
                registry.leave(session, self.identity.name)
                session.commit()
        except Exception as exc:
            log.warning("could not remove this worker's row (it lapses): %s: %s", type(exc).__name__, exc)
        self._engine.dispose()
        self._thread = None


class Heartbeat(bootsteps.StartStopStep):
    """Touches LAGTRACE_WORKER_HEARTBEAT_FILE from the worker's own timer.

    The timer runs in the main process's event loop, so the file goes stale when that loop
    is stuck (a hung broker connection) but stays fresh while a pool process runs a long
    measured task: a liveness probe on it restarts dead workers, never busy ones. Cheaper
    and more honest than `celery inspect ping`, which needs the broker and a free consumer.
    It goes stale too when the thread keeping the worker's database row fresh died
    (Registration): a worker the service takes for dead is restarted, not left running.
    """

    requires: ClassVar = {"celery.worker.components:Timer"}

    def __init__(self, parent, **kwargs):
        super().__init__(parent, **kwargs)
        self.path: Path | None = parent.app.conf.get("lagtrace_heartbeat_file")
        self.tref = None

    def start(self, parent) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        registration: Registration | None = getattr(parent, "lagtrace_registration", None)

        def touch(path: Path) -> None:
            if registration is None or registration.alive():
                _touch(path)
            else:
                log.error("the worker's database heartbeat thread died: the liveness heartbeat stops")

        touch(self.path)
        self.tref = parent.timer.call_repeatedly(HEARTBEAT_INTERVAL_S, touch, (self.path,), priority=10)

    def stop(self, parent) -> None:
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None
        if self.path is not None:
            # A stopped worker is not alive: do not leave a fresh file for the next probe.
            self.path.unlink(missing_ok=True)


class CheckoutSweeper(bootsteps.StartStopStep):
    """Removes the checkouts of attempts whose process died (services/jobs/sources.py
    sweep_checkouts), once at start and every LAGTRACE_CHECKOUT_SWEEP_INTERVAL_S, on a
    thread of its own: a large tree's removal must not stall the worker's event loop (and
    its heartbeat). Only a worker that checks code out has one (``lagtrace_sweep``).
    Started after the pool, as Registration is: a pool process forked while a sweep
    held a checkout's lock would hold it for as long as it lives."""

    requires: ClassVar = {"celery.worker.components:Pool"}

    def __init__(self, parent, **kwargs):
        super().__init__(parent, **kwargs)
        self.settings: Settings | None = parent.app.conf.get("lagtrace_sweep")
        self.stopping = threading.Event()

    def start(self, parent) -> None:
        if self.settings is not None:
            threading.Thread(
                target=sources.sweep_forever,
                args=(self.settings, self.stopping),
                name="lagtrace-checkout-sweeper",
                daemon=True,
            ).start()

    def stop(self, parent) -> None:
        self.stopping.set()


# What the measurement worker sends its pool processes when it is told to stop: each gives
# its step back (services/jobs/lease.py drain) instead of finishing it, so that a node drain
# moves the work within the pod's grace period, not after an hour-long screen. Not SIGTERM:
# billiard ends a process past its hard time limit with SIGTERM, and that step must count.
DRAIN_SIGNAL = signal.SIGUSR2


class DrainOnShutdown(bootsteps.StartStopStep):
    """On a warm or cold shutdown (SIGTERM, SIGINT, SIGQUIT to the worker: Kubernetes signals
    the pod's first process only), the drain signal goes to every pool process."""

    requires = ("celery.worker.components:Pool",)

    def __init__(self, parent, **kwargs):
        super().__init__(parent, **kwargs)
        self.pool = None

    def start(self, parent) -> None:
        self.pool = parent.pool
        worker_shutting_down.connect(self._forward, weak=False)

    def _forward(self, **_kwargs) -> None:
        # Celery's signal handler runs this in the main process (celery/apps/worker.py).
        processes = (self.pool.info or {}).get("processes", []) if self.pool is not None else []
        for pid in processes:
            try:
                os.kill(pid, DRAIN_SIGNAL)
            except ProcessLookupError:
                pass

    def stop(self, parent) -> None:
        worker_shutting_down.disconnect(self._forward)


def _drain_on_signal(**_kwargs) -> None:
    signal.signal(DRAIN_SIGNAL, drain)


class HeartbeatScheduler(Scheduler):
    """The beat's scheduler, touching the heartbeat file on every tick of its loop.

    In memory, not Celery's shelve file: the schedule is one interval task, so a restarted
    beat loses nothing worth keeping, and a pod with a read-only root has no state to
    corrupt (the shelve file failed to open in the image's Python 3.13, whose dbm
    default changed to sqlite3).
    """

    def tick(self, *args, **kwargs):
        path = self.app.conf.get("lagtrace_heartbeat_file")
        if path is not None:
            _touch(path)
        return super().tick(*args, **kwargs)


# Celery's own warning (celery/platforms.py check_privileges) on every worker start as
# root, once per process: the measurement worker and its two light workers printed it
# three times. C_FORCE_ROOT does not quiet it; it only lets Celery accept pickle as root.
ROOT_WARNING = "You're running the worker with superuser privileges"
AS_ROOT = (
    "running as root: supported (the service quickstart does, tests/e2e/test_quickstart.py): "
    "the jobs run in containers and the worker takes JSON messages only, never pickle; "
    "an ordinary user in the docker group is safer (docs/guides/security.md, Running the worker)"
)


def accepts_root(app: Celery) -> bool:
    """Whether this process is root and ``app`` may run as root as lagtrace runs it: then
    Celery's repeated warning is quieted here, and the caller says so once in its own log.

    Celery refuses root where it would unpickle a message (celery/platforms.py
    ROOT_DISALLOWED; https://docs.celeryq.dev/en/stable/userguide/security.html, Serializers:
    pickle runs what a message carries); lagtrace's app accepts JSON alone, where Celery
    itself only warns. An app that accepts pickle keeps Celery's warning and its refusal.
    """
    if os.geteuid() != 0 and os.getuid() != 0:
        return False
    if any(kind in {"pickle", "application/x-python-serialize"} for kind in app.conf.accept_content):
        return False
    warnings.filterwarnings("ignore", message=ROOT_WARNING, category=SecurityWarning)
    return True


def make_celery(settings: Settings) -> Celery:
    if not settings.broker_url:
        raise ValueError("LAGTRACE_BROKER_URL is not set: a Celery worker needs a broker (redis://...)")
    app = Celery("lagtrace", broker=settings.broker_url, set_as_current=False)
    app.conf.update(
        task_default_queue=QUEUE,
        task_routes={task_name(kind): {"queue": queue_for(kind)} for kind in LIGHT_KINDS | CHECK_KINDS},
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        task_acks_late=True,
        # A worker killed mid-task (OOM, node lost) must not ack: the message comes back.
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        # One measured run per node by default (docs/explanations/design.md#one-measurement-per-node).
        worker_concurrency=1,
        task_soft_time_limit=settings.task_soft_time_limit_s,
        task_time_limit=settings.task_time_limit_s,
        broker_transport_options={"visibility_timeout": settings.broker_visibility_timeout_s},
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        # The beat loop wakes at least this often, so its heartbeat stays fresh.
        beat_max_loop_interval=HEARTBEAT_INTERVAL_S,
        beat_scheduler=f"{HeartbeatScheduler.__module__}:{HeartbeatScheduler.__qualname__}",
        lagtrace_heartbeat_file=settings.worker_heartbeat_file,
        # The measurement worker sweeps its work dir (cli/service.py; the light pools do not).
        lagtrace_sweep=None,
        beat_schedule={
            "reconcile": {
                "task": task_name(RECONCILE),
                "schedule": settings.reconcile_interval_s,
                # No expiry: on the light queue it never waits behind a screen, and one
                # that waited (every worker down) runs once they are back; passes that
                # arrive together are folded into one (below).
                "options": {"queue": LIGHT_QUEUE},
            }
        },
    )
    # The light worker (cli/service.py) is part of its measurement worker: not counted apart.
    app.conf.lagtrace_settings = settings
    app.steps["worker"].add(Registration)
    app.steps["worker"].add(Heartbeat)
    app.steps["worker"].add(CheckoutSweeper)
    app.steps["worker"].add(DrainOnShutdown)
    worker_process_init.connect(_drain_on_signal, weak=False)
    database = WorkerDatabase(settings, CeleryDispatcher(app))
    worker_process_init.connect(database.after_fork, weak=False)

    def step_task(kind: str):
        # One task per step, so that steps can be routed and rate-limited apart; the body
        # is the same: ids in, one engine step (which commits; the outbox sends what follows).
        def task(job_id: int, name: str) -> None:
            steps.run_step(database.session_factory(), settings, Step(kind, job_id, name))

        task.__name__ = task.__qualname__ = kind
        return app.task(name=task_name(kind))(task)

    for kind in (PREPARE, SCREEN, FINISH, BISECT, NOTIFY):
        step_task(kind)

    passes = ReconcilePasses(settings.reconcile_interval_s / 2)

    @app.task(name=task_name(RECONCILE))
    def reconcile() -> None:
        with passes.due() as due:
            if not due:
                return
            with database.session_factory()() as session:
                steps = reconciler.reconcile(session, settings)
                session.commit()  # the outbox resends them
        if steps:
            log.info("reconciler resent %d steps", len(steps))

    return app
