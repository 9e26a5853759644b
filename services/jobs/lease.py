"""Driver 2 of the job engine: a ledger step under its lease (Celery workers, `lagtrace
serve`'s thread).

A step is claimed from the ledger, run by its handler while a heartbeat renews its lease,
and committed only while this worker still holds it (``hold``, the fence). The database or
the Docker engine going away pauses the step and gives it back; a failure is recorded on
the job, and recording it is retried until it is.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from services.db import unreachable
from services.errors import BadInput, EngineUnavailable, ScratchExceeded
from services.jobs import disk, ledger, lifecycle
from services.jobs.dispatch import NOTIFY, Step
from services.measure.executors import remove_own_containers, stop_job_containers, wait_for_engine
from services.measure.executors.scratch import ScratchAccount, stepping
from services.models import Job, JobStatus, JobTask, TaskState
from services.settings import Settings

log = logging.getLogger("lagtrace.engine")

Handler = Callable[[Session, Settings, JobTask], None]


class Drained(BaseException):
    """Raised in the step's thread when its worker is stopping (a node drain, a rollout):
    the step gives itself back, uncounted, for another worker to run at once. A
    BaseException, like KeyboardInterrupt, so that no ``except Exception`` on the way out
    mistakes it for the step's own failure."""


# Set while this process runs a step's handler: a drain interrupts only that.
_stepping = threading.Event()


def drain(_signum: int | None = None, _frame: object = None) -> None:
    """The drain signal's handler in a worker's pool process (worker/app.py): the step it
    runs stops where it is; between steps there is nothing to give back."""
    if _stepping.is_set():
        _stepping.clear()  # one give-back, however many signals follow
        raise Drained


class LeaseLost(Exception):
    """Raised at a checkpoint once the step was re-leased to another worker (this one was
    presumed dead: its heartbeats did not reach the database): this one stops, recording nothing."""


# The session.info key under which run_step keeps (worker, attempt) of the step it runs.
HOLDER = "lagtrace.holder"


class StepHeartbeat:
    """Renews the lease of the step this process runs, from a thread of its own.

    The beat stops with the process (kill -9, the OOM killer, SIGTERM's default action), so
    an expired lease means a dead worker whatever killed it. Each beat also looks at the
    job: once it is cancelled, its containers are stopped at once, so cancel frees the
    node within one heartbeat rather than after the current run.
    """

    def __init__(self, session_factory: sessionmaker[Session], settings: Settings, task: JobTask, executor: str):
        self.session_factory, self.settings = session_factory, settings
        self.task_id, self.job_id, self.worker, self.attempt = task.id, task.job_id, task.worker or "", task.attempts
        self.executor = executor
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"lagtrace-heartbeat-{task.id}", daemon=True)

    def __enter__(self) -> StepHeartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join(timeout=self.settings.heartbeat_interval_s + 15)

    def beat(self) -> None:
        with self.session_factory() as session:
            ours = ledger.renew(session, self.settings, self.task_id, self.worker, self.attempt)
            status = session.scalar(select(Job.status).where(Job.id == self.job_id))
            session.commit()
        if not ours and not self.lost:
            self.lost = True
            log.warning("job %s: task %s is no longer held by %s", self.job_id, self.task_id, self.worker)
        # "auto" may have become docker: asking the engine costs one request per cancelled job.
        # Every beat while cancelled: a container started after the last kill is killed too.
        if status is JobStatus.cancelled and self.executor != "local":
            stopped = stop_job_containers(self.settings, self.job_id)
            if stopped:
                log.info("job %s cancelled: stopped %d running container(s)", self.job_id, len(stopped))

    def _loop(self) -> None:
        while not self._stop.wait(self.settings.heartbeat_interval_s):
            try:
                self.beat()
            except Exception as exc:
                # The database (or the engine) is away: the next beat tries again; the lease
                # outlives one missed beat (Settings: interval at most half the lease).
                log.warning("job %s: heartbeat missed: %s: %s", self.job_id, type(exc).__name__, exc)


def hold(session: Session, task: JobTask) -> None:
    """Fence: lock the step's row and make sure this worker still holds it before committing."""
    holder = session.info.get(HOLDER)
    if holder is None:
        return  # a handler called outside run_step (tests): nobody else can hold it
    worker, attempt = holder
    # Only a claim changes the holder and the attempt; the state may be this step's own
    # uncommitted change (done), or pending again after the reconciler resent it, in which
    # case finishing it here leaves the resent message nothing to claim.
    with session.no_autoflush:
        held = session.execute(
            select(JobTask.worker, JobTask.attempts).where(JobTask.id == task.id).with_for_update()
        ).one()
    if held.worker != worker or held.attempts != attempt:
        raise LeaseLost


def run_step(
    session_factory: sessionmaker[Session], settings: Settings, step: Step, handlers: Mapping[str, Handler]
) -> None:
    """One step in its own session: claim, work, commit (the outbox then sends what comes next).

    While the step runs, a heartbeat renews its lease. The database going away pauses the
    step: it waits for the database and gives the step back to the ledger, not counted as an
    attempt. The Docker engine going away pauses it too (``_wait_out_engine``), and so does a
    work directory short of space (services/jobs/disk.py): no step is taken then, and one
    that fails meanwhile is given back uncounted, unless its own runs filled it (their
    scratch is counted in ``account``). A worker that is stopping gives its step
    back at once, uncounted (``drain``). A failure is recorded on the job, and recording it
    is retried until it is.
    """
    handler = handlers[step.kind]
    worker, attempt = ledger.worker_name(settings), None
    short = disk.short_of_space(settings) if step.kind != NOTIFY else None
    if short is not None:
        # Not claimed: the reconciler sends it again once its lease is over, to whichever
        # worker has room then (services/jobs/disk.py).
        log.warning("%s of job %s not taken: %s", step.task_name, step.job_id, short)
        return
    # What the step's runs write to the disk, whichever executor runs them
    # (services/measure/executors/scratch.py), and the room it was taken with.
    account = ScratchAccount(settings, disk.room(settings))
    try:
        with session_factory() as session:
            task = ledger.claim(session, settings, step)
            if task is None:
                return
            attempt = task.attempts
            executor = task.job.executor
            session.commit()
            session.info[HOLDER] = (worker, attempt)
            with StepHeartbeat(session_factory, settings, task, executor), stepping(account):
                try:
                    _stepping.set()
                    try:
                        handler(session, settings, task)
                        hold(session, task)
                        session.commit()
                    except Exception as exc:
                        _reraise_stop(exc)
                        raise
                    finally:
                        _stepping.clear()
                except Drained:
                    # The checkout and the run containers were removed on the way out
                    # (their context managers); a container the signal caught being made is
                    # found by its labels.
                    _rollback(session)
                    left = remove_own_containers(settings, step.job_id)
                    log.warning(
                        "%s of job %s given back: the worker is stopping (%d container(s) removed)",
                        step.task_name,
                        step.job_id,
                        len(left),
                    )
                    _give_back(session_factory, settings, step, worker, attempt)
                except LeaseLost:
                    session.rollback()
                    log.warning(
                        "%s of job %s was re-leased to another worker; this one stops", step.task_name, step.job_id
                    )
                except EngineUnavailable as exc:
                    # Still under the heartbeat: the lease holds while the engine is waited for.
                    _rollback(session)
                    _wait_out_engine(session_factory, settings, step, worker, attempt, exc)
                except Exception as exc:
                    if unreachable(exc):
                        raise
                    _rollback(session)
                    error = f"{task.name}: {type(exc).__name__}: {exc}"
                    mine = isinstance(exc, BadInput | ScratchExceeded)
                    short = None if mine else disk.short_of_space(settings)
                    own = None if short is None else disk.own_doing(settings, account)
                    if short is not None and own is None:
                        # The disk's fault, whatever failed: given back, not counted. Not
                        # a run over a cap of its scratch, nor a failure on a disk its own
                        # runs filled: those count (tests/security/test_step_scratch.py).
                        log.warning(
                            "%s of job %s paused: %s (%s: %s); it is given back",
                            step.task_name,
                            step.job_id,
                            short,
                            type(exc).__name__,
                            exc,
                        )
                        _give_back(session_factory, settings, step, worker, attempt)
                        return
                    if own is not None:
                        error += f" ({short}; {own})"
                    _until_recorded(
                        session_factory,
                        settings,
                        f"recording the failure of {step.task_name}",
                        _failer(settings, step, error),
                    )
                    raise
    except Exception as exc:
        if not unreachable(exc):
            raise
        log.warning(
            "%s of job %s paused: the database is unreachable (%s); it is given back once the database answers",
            step.task_name,
            step.job_id,
            exc,
        )
        _give_back(session_factory, settings, step, worker, attempt)


def _reraise_stop(exc: Exception) -> None:
    """A drain or a warm shutdown that strikes inside the threading module (a thread being
    started, a lock being restored) leaves ``RuntimeError: release unlocked lock`` on its
    way out, the signal's exception only in its context: the signal is the cause, not the
    step, so it is raised again as what it was (tests/services/jobs/test_lease.py)."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, Drained):
            raise Drained from exc
        if isinstance(link, SystemExit):
            raise SystemExit(link.code) from exc
        link = link.__cause__ or link.__context__


def _give_back(
    session_factory: sessionmaker[Session], settings: Settings, step: Step, worker: str, attempt: int | None
) -> None:
    """The step back to the ledger, its attempt not counted (ledger.release), retried until recorded."""
    _until_recorded(
        session_factory,
        settings,
        f"giving back {step.task_name}",
        lambda s: ledger.release(s, settings, step, worker, attempt),
    )


def _wait_out_engine(
    session_factory: sessionmaker[Session],
    settings: Settings,
    step: Step,
    worker: str,
    attempt: int | None,
    exc: EngineUnavailable,
) -> None:
    """The Docker engine went away under the step (refused, reset, timed out, restarted) or
    failed it with a 5xx: the environment, never the command, so nothing of this attempt is
    stored. The engine is waited for with backoff (at most LAGTRACE_DOCKER_ENGINE_WAIT_S);
    what the attempt left is removed, and the step is given back to the ledger: at once and
    not counted as an attempt when the engine had stopped answering and answers again (as
    for the database), else counted and after the same pause again. An engine that kept
    answering (a 5xx, a container killed from outside) counts, so no cause inside the
    job's reach makes a step run for ever; with its attempts used up the job fails saying
    the engine was unavailable (tests/services/jobs/test_lease.py)."""
    log.warning(
        "%s of job %s paused: the Docker engine is unavailable (%s); waiting up to %g s for it",
        step.task_name,
        step.job_id,
        exc,
        settings.docker_engine_wait_s,
    )
    back = wait_for_engine(settings.docker_engine_wait_s, lambda line: log.info("job %s: %s", step.job_id, line))
    if back:
        left = remove_own_containers(settings, step.job_id)
        if left:
            log.info("job %s: removed %d container(s) of the interrupted attempt", step.job_id, len(left))
    _until_recorded(
        session_factory,
        settings,
        f"giving back {step.task_name}",
        lambda s: _give_back_after_outage(s, settings, step, worker, attempt, str(exc), back and not exc.answered),
    )


def _give_back_after_outage(
    session: Session,
    settings: Settings,
    step: Step,
    worker: str,
    attempt: int | None,
    error: str,
    uncounted: bool,
) -> None:
    task = session.scalar(
        select(JobTask).where(JobTask.job_id == step.job_id, JobTask.name == step.task_name).with_for_update()
    )
    if task is None or task.state is not TaskState.running or task.worker != worker or task.attempts != attempt:
        return  # finished, cancelled, or re-leased meanwhile: not ours to give back
    if task.job.status in lifecycle.FINISHED:
        # A cancel kills the job's containers, which looks the same from here.
        task.state = TaskState.cancelled
        return
    if uncounted:
        log.info("%s of job %s: the Docker engine answers again; the step runs again", step.task_name, step.job_id)
        ledger.release(session, settings, step, worker, attempt)
        return
    reason = f"{task.name}: the Docker engine was unavailable: {error}"
    if task.attempts >= settings.task_max_attempts:
        lifecycle.fail_job(session, settings, task.job, task, f"{reason} (in {task.attempts} attempts; giving up)")
        return
    log.warning(
        "%s of job %s: given back; the reconciler sends it again in %g s",
        step.task_name,
        step.job_id,
        settings.docker_engine_wait_s,
    )
    ledger.postpone(session, task, reason, settings.docker_engine_wait_s)


def _rollback(session: Session) -> None:
    try:
        session.rollback()
    except Exception as exc:
        if not unreachable(exc):
            raise


def _failer(settings: Settings, step: Step, error: str) -> Callable[[Session], None]:
    def record(session: Session) -> None:
        task = session.scalar(select(JobTask).where(JobTask.job_id == step.job_id, JobTask.name == step.task_name))
        if task is not None and task.job.status is JobStatus.cancelled:
            task.state = TaskState.cancelled  # what a cancel stopped (a killed install) did not fail
        elif task is not None:
            lifecycle.fail_job(session, settings, task.job, task, error)

    return record


def _until_recorded(
    session_factory: sessionmaker[Session], settings: Settings, what: str, action: Callable[[Session], object]
) -> None:
    """Run ``action`` in a fresh session and commit, retrying while the database is unreachable."""
    while True:
        try:
            with session_factory() as session:
                action(session)
                session.commit()
                return
        except Exception as exc:
            if not unreachable(exc):
                raise
            log.warning("%s waits for the database: %s", what, exc)
            time.sleep(settings.database_retry_s)
