"""The JobTask ledger: one row per step of a service job, claimed under a lease.

A step's message carries only ids; the row is the record. A duplicate message, a step of
a finished job, or a step another worker holds under a live lease is claimed by nobody,
so Redis redelivering a message (acks are late) or the reconciler resending one is safe.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from services.jobs import outbox
from services.jobs.dispatch import NOTIFY, Step
from services.models import Job, JobSource, JobTask, TaskState, database_now
from services.settings import Settings

log = logging.getLogger("lagtrace.ledger")

OVER = (TaskState.done, TaskState.failed, TaskState.cancelled)


def worker_name(settings: Settings) -> str:
    # Host and process: two workers of one node are told apart in the ledger. In a pod the
    # host name is the pod's: the node (LAGTRACE_NODE_NAME) and its CPU model say where the
    # configuration was measured.
    name = f"{socket.gethostname()}/{os.getpid()}"
    if settings.node_name:
        name += f" on {settings.node_name}"
    model = cpu_model()
    if model:
        name += f" ({model})"
    return name[:200]


def cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    return " ".join(value.split())
    except OSError:
        pass
    return None


def lease_from_now(session: Session, settings: Settings) -> dt.datetime:
    return database_now(session) + dt.timedelta(seconds=settings.lease_s)


def add_task(
    session: Session, job: Job, settings: Settings, kind: str, name: str | None = None, config_id: int | None = None
) -> Step:
    """Record a pending step; its message goes out when the transaction commits (outbox)."""
    name = name or kind
    session.add(
        JobTask(
            job_id=job.id,
            config_id=config_id,
            step=kind,
            name=name,
            state=TaskState.pending,
            lease_expires_at=lease_from_now(session, settings),
        )
    )
    session.flush()
    step = Step(kind, job.id, name)
    outbox.send_after_commit(session, step)
    return step


def resend(session: Session, settings: Settings, task: JobTask) -> Step:
    """Put a task back to pending under a fresh lease and send its message again after commit."""
    task.state = TaskState.pending
    task.lease_expires_at = lease_from_now(session, settings)
    step = Step(task.step, task.job_id, task.name)
    outbox.send_after_commit(session, step)
    return step


def claim(session: Session, settings: Settings, step: Step) -> JobTask | None:
    """The step's task, now running under this worker's lease; None when it is not ours to run."""
    task = session.scalar(
        select(JobTask).where(JobTask.job_id == step.job_id, JobTask.name == step.task_name).with_for_update()
    )
    if task is None or task.state in OVER:
        return None
    if task.attempts >= settings.task_max_attempts:
        return None  # the reconciler gives it up and says why
    if task.state is TaskState.running and _aware(task.lease_expires_at) > database_now(session):
        log.info("%s of job %s is held by %s until %s", task.name, task.job_id, task.worker, task.lease_expires_at)
        return None
    task.state = TaskState.running
    task.attempts += 1
    task.worker = worker_name(settings)
    task.lease_expires_at = lease_from_now(session, settings)
    return task


def renew(session: Session, settings: Settings, task_id: int, worker: str, attempt: int) -> bool:
    """The heartbeat: extend the lease of a step this worker still holds (this attempt of it).
    False when it is no longer ours (finished, cancelled, or re-leased after we were presumed dead)."""
    result = session.execute(
        update(JobTask)
        .where(
            JobTask.id == task_id,
            JobTask.state == TaskState.running,
            JobTask.worker == worker,
            JobTask.attempts == attempt,
        )
        .values(lease_expires_at=lease_from_now(session, settings))
        .execution_options(synchronize_session=False)
    )
    return bool(getattr(result, "rowcount", 0))


def release(session: Session, settings: Settings, step: Step, worker: str, attempt: int | None) -> bool:
    """Give a step back without counting the attempt (the database went away under it, not the
    job's fault) and send it again after commit. A step that is pending is sent again too (its
    message was acknowledged); one another worker holds now is left to it."""
    task = session.scalar(
        select(JobTask).where(JobTask.job_id == step.job_id, JobTask.name == step.task_name).with_for_update()
    )
    if task is None or task.state in OVER:
        return False
    if task.state is TaskState.running:
        if task.worker != worker or task.attempts != attempt:
            return False
        task.attempts = max(task.attempts - 1, 0)
    resend(session, settings, task)
    return True


def postpone(session: Session, task: JobTask, error: str, delay_s: float) -> None:
    """Give a running step back, its attempt counted, to be sent again by the reconciler
    once ``delay_s`` is over (what it waits for, the Docker engine, may be back by then)."""
    task.state = TaskState.pending
    task.error = error
    task.lease_expires_at = database_now(session) + dt.timedelta(seconds=delay_s)


def cancel_open_tasks(session: Session, job: Job, keep: JobTask | None = None) -> None:
    """Every pending or running task of ``job`` (but ``keep``) is cancelled."""
    query = select(JobTask).where(JobTask.job_id == job.id, JobTask.state.in_([TaskState.pending, TaskState.running]))
    if keep is not None:
        query = query.where(JobTask.id != keep.id)
    for task in session.scalars(query):
        task.state = TaskState.cancelled


def notify_step(session: Session, job: Job, settings: Settings) -> Step | None:
    """Report the job's current state to GitHub, once per state, if it came from there."""
    source = session.get(JobSource, job.id)
    if source is None or not source.github_repository:
        return None
    name = f"{NOTIFY}:{job.status.value}"
    if session.scalar(select(JobTask).where(JobTask.job_id == job.id, JobTask.name == name)):
        return None
    return add_task(session, job, settings, NOTIFY, name)


def renotify_step(session: Session, job: Job, settings: Settings, reason: str) -> Step | None:
    """Report a finished job to GitHub again, once per ``reason`` (a finding that a later
    job put on it), if it came from there."""
    source = session.get(JobSource, job.id)
    if source is None or not source.github_repository:
        return None
    name = f"{NOTIFY}:{reason}"[:64]
    if session.scalar(select(JobTask).where(JobTask.job_id == job.id, JobTask.name == name)):
        return None
    return add_task(session, job, settings, NOTIFY, name)


def _aware(moment: dt.datetime | None) -> dt.datetime:
    # SQLite hands back naive datetimes; they were written as UTC.
    if moment is None:
        return dt.datetime.min.replace(tzinfo=dt.UTC)
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)
