"""`lagtrace serve`, `lagtrace worker`, `lagtrace token create`: the service's processes."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from services import migrate, steps
from services.accounts.secret_key import shared_secret_key
from services.accounts.tokens import TokenListing, create_token, list_tokens, revoke_tokens
from services.accounts.users import create_user, list_users
from services.db import make_engine, make_session_factory
from services.errors import LagtraceError
from services.github.repositories import register_repository
from services.jobs import outbox
from services.jobs.dispatch import Dispatcher, InProcessDispatcher
from services.jobs.reconcile import reconcile
from services.jobs.sources import sweep_forever
from services.measure import hostload
from services.models import Project
from services.redact import redact
from services.settings import Settings, prepare_work_dir

log = logging.getLogger("lagtrace.serve")
T = TypeVar("T")


def _current_engine(settings: Settings, pool_size: int | None = None) -> Engine:
    engine = make_engine(settings, pool_size=pool_size)
    try:
        migrate.ensure_current(settings, engine)
    except migrate.SchemaNotCurrent as exc:
        engine.dispose()
        raise LagtraceError(str(exc)) from None
    return engine


def in_process_dispatcher(settings: Settings, engine: Engine) -> tuple[InProcessDispatcher, sessionmaker[Session]]:
    """The embedded job thread (not started) and the sessions it runs steps in, which send
    their follow-up steps back to it."""
    session_factory = make_session_factory(engine)
    dispatcher = InProcessDispatcher(lambda step: steps.run_step(session_factory, settings, step))
    outbox.bind(session_factory, dispatcher)
    return dispatcher, session_factory


def _reconcile_forever(session_factory: sessionmaker[Session], settings: Settings, stop: threading.Event) -> None:
    # The embedded server has no beat: this thread resends what a lost step left behind.
    while not stop.wait(settings.reconcile_interval_s):
        try:
            with session_factory() as session:
                reconcile(session, settings)
                session.commit()  # the outbox resends
        except Exception:
            log.exception("reconciler pass failed; trying again in %s s", settings.reconcile_interval_s)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity; a container's cpuset included)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def serve(settings: Settings, host: str, port: int, threads: int, processes: int | None = None) -> None:
    """Serve on ``host:port``. With a broker, ``processes`` (None: one per usable CPU) serve
    the one listening socket, each its own interpreter: one process of waitress threads runs
    Python on one CPU at a time (the GIL), so a page's rendering never used the second CPU.
    Without a broker jobs run in this process, and only it can serve."""
    wanted = usable_cpus() if processes is None else processes
    if not settings.broker_url or wanted <= 1:
        if settings.broker_url is None and wanted > 1:
            log.info("no LAGTRACE_BROKER_URL: one serving process (it also runs the jobs)")
        _serve_one(settings, threads, host=host, port=port)
        return
    # Schema check once, before forking: no engine, pool or thread crosses a fork.
    engine = _current_engine(settings)
    if settings.secret_key is None:
        # Made here once, so the children only read it (each would make it if it were missing).
        with make_session_factory(engine)() as session:
            shared_secret_key(session)
    engine.dispose()
    listener = socket.create_server((host, port), backlog=1024)
    log.info("serving on %s:%s with %d processes of %d threads", host, port, wanted, threads)
    _supervise(wanted, lambda: _serve_one(settings, threads, sockets=[listener]))


# A response up to this size is sent from memory; waitress's default (1 MB) wrote a larger
# one to a temporary file first and read it back: a 5,000-test suite's stored report (1.4
# MB, served as it is by the API) went through the disk on every request.
OUTBUF_IN_MEMORY = 8 * 1024 * 1024


def _serve_one(settings: Settings, threads: int, **where: object) -> None:
    import waitress

    from cli.wsgi import create_app

    # A connection kept for each request thread (and the embedded job and reconciler
    # threads): with SQLAlchemy's default of 5 for 8 threads, a busy process opened and
    # closed connections (a PostgreSQL backend each, its prepared statements lost).
    engine = _current_engine(settings, pool_size=threads + 2)
    stop = threading.Event()
    embedded: InProcessDispatcher | None = None
    if settings.broker_url:
        from worker import CeleryDispatcher, make_celery

        dispatcher: Dispatcher = CeleryDispatcher(make_celery(settings))
        log.info("jobs go to the Celery workers at %s", redact(settings.broker_url))
    else:
        prepare_work_dir(settings)  # this process checks out and runs the jobs
        threading.Thread(
            target=sweep_forever, args=(settings, stop), name="lagtrace-checkout-sweeper", daemon=True
        ).start()
        embedded, session_factory = in_process_dispatcher(settings, engine)
        dispatcher = embedded.start()
        # Nothing else ever ran these steps: whatever is unfinished was cut off by our last exit.
        with session_factory() as session:
            reconcile(session, settings, orphaned=True)
            session.commit()
        threading.Thread(
            target=_reconcile_forever,
            args=(session_factory, settings, stop),
            name="lagtrace-reconciler",
            daemon=True,
        ).start()
        log.info("no LAGTRACE_BROKER_URL: jobs run in this process, one at a time")
    app = create_app(settings, dispatcher, engine)
    try:
        waitress.serve(app, threads=threads, ident="lagtrace", outbuf_overflow=OUTBUF_IN_MEMORY, **where)
    finally:
        stop.set()
        if embedded is not None:
            embedded.stop(timeout=5)
        engine.dispose()


# A serving process that dies is replaced, but not in a loop: more deaths than this
# within RESPAWN_WINDOW_S mean something is wrong with every one of them (the database
# gone, a bad setting), and the supervisor exits for its own supervisor to see.
RESPAWN_LIMIT = 5
RESPAWN_WINDOW_S = 60.0


def _supervise(processes: int, serve_one: Callable[[], None]) -> None:
    """Fork ``processes`` children running ``serve_one`` and keep that many alive until a
    SIGTERM or SIGINT, which goes on to every child. The parent runs no thread and holds
    no connection, so forking a replacement from it is safe."""
    children: set[int] = set()
    stopping = False

    def spawn() -> None:
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            code = 0
            try:
                serve_one()
            except BaseException:
                log.exception("serving process %d failed", os.getpid())
                code = 1
            finally:
                os._exit(code)
        children.add(pid)

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for pid in list(children):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for _ in range(processes):
        spawn()
    deaths: list[float] = []
    while children:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        children.discard(pid)
        if stopping:
            continue
        now = time.monotonic()
        deaths = [t for t in deaths if now - t < RESPAWN_WINDOW_S] + [now]
        log.error("serving process %d exited (status %d)", pid, status)
        if len(deaths) > RESPAWN_LIMIT:
            stop(signal.SIGTERM, None)
            for child in list(children):
                os.waitpid(child, 0)
            raise LagtraceError(f"{len(deaths)} serving processes died within {RESPAWN_WINDOW_S:g} s; see the log")
        spawn()


# Light tasks at once in a worker's light pool: the reconciler and a check run side by side.
LIGHT_CONCURRENCY = 2
# How long a stopping worker gives its light pool to finish what it runs (seconds).
LIGHT_STOP_S = 30.0


def worker(
    settings: Settings,
    concurrency: int,
    beat: bool,
    loglevel: str,
    light_only: bool = False,
    checks_only: bool = False,
) -> None:
    """A Celery worker on the measurement queue, with a light pool and a check-run pool beside it.

    Celery runs one pool per worker, and the measurement pool runs one hour-long screen at
    a time: the light queue (worker/app.py LIGHT_QUEUE: the reconciler) and the check-run
    queue (CHECKS_QUEUE: GitHub calls, which may wait on GitHub) each get a worker process
    of their own, children of this one, with a small thread pool. ``light_only`` /
    ``checks_only``: be one of those.
    """
    from worker import make_celery
    from worker.app import AS_ROOT, CHECKS_QUEUE, LIGHT_QUEUE, QUEUE, accepts_root

    if not (light_only or checks_only):
        prepare_work_dir(settings)  # the light and check-run workers check nothing out
        if (shared := hostload.shared_cores_warning()) is not None:
            log.warning("%s", shared)
    _current_engine(settings).dispose()  # refuse to start on a database that is not migrated
    app = make_celery(settings)
    # Said once, by the measurement worker: its light workers quiet Celery's warning alike.
    if accepts_root(app) and not (light_only or checks_only):
        log.warning("%s", AS_ROOT)
    common = [f"--loglevel={loglevel}", "--without-gossip", "--without-mingle"]
    if light_only or checks_only:
        # The probe watches the measurement worker's main loop; this one's parent restarts it.
        app.conf.lagtrace_heartbeat_file = None
        app.conf.lagtrace_settings = None  # nor does the database count it as a worker of its own
        threading.Thread(target=_exit_with_parent, name="lagtrace-parent-watch", daemon=True).start()
        queue, threads = (
            (LIGHT_QUEUE, LIGHT_CONCURRENCY) if light_only else (CHECKS_QUEUE, settings.check_run_concurrency)
        )
        app.worker_main(
            [
                "worker",
                *common,
                f"--queues={queue}",
                "--pool=threads",
                f"--concurrency={threads}",
                f"--hostname={queue}-{os.getppid()}@%h",
            ]
        )
        return
    # Checkouts of attempts that died with an earlier process of this worker (or of any
    # sharing its work dir) are removed now and periodically (worker/app.py CheckoutSweeper).
    app.conf.lagtrace_sweep = settings
    argv = ["worker", *common, f"--concurrency={concurrency}", f"--queues={QUEUE}"]
    if beat:
        argv += ["--beat", f"--schedule={settings.work_dir / 'celerybeat-schedule'}"]
    with _light_pool(loglevel):
        app.worker_main(argv)


def _exit_with_parent() -> None:
    """A light worker whose measurement worker died (kill -9 of it alone) stops warm."""
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(1)
    log.warning("the worker that started this light worker is gone: stopping")
    os.kill(os.getpid(), signal.SIGTERM)


@contextmanager
def _light_pool(loglevel: str) -> Iterator[None]:
    """The light worker and the check-run worker as child processes, each started again if
    it dies, stopped with us.

    Same process group, so a signal to the worker's group reaches all."""
    stop = threading.Event()
    current: dict[str, subprocess.Popen] = {}

    def supervise(flag: str) -> None:
        command = [sys.executable, "-m", "cli.main", "worker", flag, f"--loglevel={loglevel}"]
        while not stop.is_set():
            child = subprocess.Popen(command)
            current[flag] = child
            code = child.wait()
            if stop.is_set():
                return
            log.warning("the %s worker exited (%s); starting it again", flag.removeprefix("--"), code)
            stop.wait(1.0)

    supervisors = [
        threading.Thread(target=supervise, args=(flag,), name=f"lagtrace{flag.removesuffix('-only')}-pool", daemon=True)
        for flag in ("--light-only", "--checks-only")
    ]
    for supervisor in supervisors:
        supervisor.start()
    try:
        yield
    finally:
        stop.set()
        children = list(current.values())
        for child in children:
            if child.poll() is None:
                child.terminate()  # a warm shutdown: it finishes the light task it runs
        for child in children:
            try:
                child.wait(LIGHT_STOP_S)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        for supervisor in supervisors:
            supervisor.join(timeout=5)


def beat(settings: Settings, loglevel: str) -> None:
    """The scheduler alone: it sends the reconciler task every LAGTRACE_RECONCILE_INTERVAL_S
    for the workers to run. One per cluster; it needs no container engine."""
    from worker import make_celery

    _current_engine(settings).dispose()  # the reconciler it schedules needs a migrated database
    if settings.worker_heartbeat_file is not None:
        settings.worker_heartbeat_file.parent.mkdir(parents=True, exist_ok=True)
    app = make_celery(settings)  # its scheduler keeps the schedule in memory (worker/app.py)
    app.start(["beat", f"--loglevel={loglevel}"])


def _committed(settings: Settings, action: Callable[[Session], T]) -> T:
    """Run ``action(session)`` in one transaction on a database at the current schema."""
    engine = _current_engine(settings)
    try:
        with make_session_factory(engine)() as session:
            result = action(session)
            session.commit()
            return result
    finally:
        engine.dispose()


def new_token(settings: Settings, project: str, name: str, days: float | None) -> str:
    return _committed(settings, lambda session: create_token(session, project, name, days=days))


def revoke(settings: Settings, prefix: str | None, project: str | None) -> list[str]:
    return _committed(settings, lambda session: revoke_tokens(session, prefix=prefix, project=project))


def register(
    settings: Settings,
    project: str,
    full_name: str,
    url: str | None,
    secret: str | None,
    allow_forks: bool,
    images: list[str],
    rotate_secret: bool = False,
) -> tuple[str, str]:
    """The repository's webhook secret, and what became of it: new, kept, rotated or set."""

    def action(session: Session) -> tuple[str, str]:
        before = session.scalar(select(Project.webhook_secret).where(Project.github_repository == full_name))
        _, made = register_repository(
            session,
            settings,
            project=project,
            full_name=full_name,
            url=url,
            secret=secret,
            allow_forks=allow_forks,
            images=images,
            rotate_secret=rotate_secret,
        )
        state = "new" if before is None else "kept" if made == before else "rotated" if secret is None else "set"
        return made, state

    return _committed(settings, action)


def new_user(settings: Settings, username: str, password: str, projects: list[str], admin: bool) -> None:
    _committed(settings, lambda session: create_user(session, username, password, projects=projects, admin=admin))


def tokens(settings: Settings, project: str | None) -> list[TokenListing]:
    return _committed(settings, lambda session: list_tokens(session, project=project))


def users(settings: Settings) -> list[tuple[str, bool, list[str], str | None]]:
    """Each account's name, admin flag, projects and last sign-in (read inside the session)."""

    def action(session):
        return [
            (
                user.username,
                user.is_admin,
                [project.name for project in user.projects],
                user.last_sign_in_at.strftime("%Y-%m-%d %H:%M") if user.last_sign_in_at else None,
            )
            for user in list_users(session)
        ]

    return _committed(settings, action)
