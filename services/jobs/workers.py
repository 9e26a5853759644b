"""Which workers are alive, and which steps lost theirs: read from the database.

Each running `lagtrace worker` keeps a row in ``workers`` fresh from its main process
(worker/app.py WorkerRegistration), idle or busy; a step's own process renews the step's
lease every heartbeat (services/jobs/engine.py StepHeartbeat). Both beat every
Settings.heartbeat_interval_s, and a heartbeat older than ``lapse_s`` has lapsed: that
worker, or that step's process, is taken for dead. The reconciler still re-leases a step
only when its lease is over (services/jobs/reconcile.py); what this module reads is for
people (the job page, the API, `lagtrace submit`, /readyz), so that a dead worker is
seen within about one heartbeat rather than when the lease lapses.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from services.jobs.dispatch import NOTIFY
from services.jobs.ledger import cpu_model
from services.measure.configs import format_cpulist
from services.models import Job, JobTask, TaskState, Worker, database_now
from services.settings import Settings

LOST = "worker lost, waiting to be taken again"
NO_WORKER = "no worker is running: start one with `lagtrace worker`"
# A worker killed without a chance to say so (kill -9, a lost node) leaves its row; rows
# silent this long are dropped when a worker starts, so the list shows recent workers only.
FORGET_AFTER = dt.timedelta(days=1)


def lapse_s(settings: Settings) -> float:
    """How old a heartbeat may be before its worker is taken for dead: one interval, plus
    half of one (at least 5 s) for a beat delayed by a busy machine or a slow commit."""
    return settings.heartbeat_interval_s + max(5.0, settings.heartbeat_interval_s / 2)


def expects_workers(settings: Settings) -> bool:
    """Jobs go to Celery workers (a broker is set); without one, the server runs them itself."""
    return bool(settings.broker_url)


@dataclass(frozen=True)
class Identity:
    """What a worker tells about itself in its row."""

    name: str
    node: str | None
    cpus: str
    cpu_model: str | None
    concurrency: int

    @classmethod
    def here(cls, settings: Settings, concurrency: int) -> Identity:
        # Host and pid, as the ledger names a step's process (services/jobs/ledger.py).
        return cls(
            name=f"{socket.gethostname()}/{os.getpid()}"[:200],
            node=settings.node_name,
            cpus=settings.worker_cpus or format_cpulist(os.sched_getaffinity(0)),
            cpu_model=cpu_model(),
            concurrency=concurrency,
        )


def beat(session: Session, identity: Identity) -> None:
    """The worker's heartbeat: its row's time is now (the row is made on the first beat,
    and again after anyone removed it)."""
    now = database_now(session)
    result = session.execute(
        update(Worker)
        .where(Worker.name == identity.name)
        .values(heartbeat_at=now)
        .execution_options(synchronize_session=False)
    )
    if getattr(result, "rowcount", 0):
        return
    session.execute(delete(Worker).where(Worker.heartbeat_at < now - FORGET_AFTER))
    session.add(
        Worker(
            name=identity.name,
            node=identity.node,
            cpus=identity.cpus,
            cpu_model=identity.cpu_model,
            concurrency=identity.concurrency,
            started_at=now,
            heartbeat_at=now,
        )
    )
    session.flush()


def leave(session: Session, name: str) -> None:
    """A worker stopping on purpose is gone at once, not after its heartbeat lapses."""
    session.execute(delete(Worker).where(Worker.name == name))


def live(session: Session, settings: Settings) -> Sequence[Worker]:
    """The workers whose heartbeat has not lapsed, the most recently started first."""
    since = database_now(session) - dt.timedelta(seconds=lapse_s(settings))
    return session.scalars(select(Worker).where(Worker.heartbeat_at >= since).order_by(Worker.started_at.desc())).all()


def listing(session: Session, settings: Settings) -> list[dict[str, object]]:
    """Every worker heard from recently (the API's /workers): live or not, and since when."""
    now = database_now(session)
    rows = session.scalars(select(Worker).order_by(Worker.heartbeat_at.desc())).all()
    return [
        {
            "name": w.name,
            "node": w.node,
            "cpus": w.cpus,
            "cpu_model": w.cpu_model,
            "concurrency": w.concurrency,
            "started_at": _aware(w.started_at).isoformat(),
            "heartbeat_at": _aware(w.heartbeat_at).isoformat(),
            "heartbeat_age_s": round((now - _aware(w.heartbeat_at)).total_seconds(), 1),
            "alive": (now - _aware(w.heartbeat_at)).total_seconds() <= lapse_s(settings),
        }
        for w in rows
    ]


def last_beat(task: JobTask, settings: Settings) -> dt.datetime | None:
    """When the process running ``task`` last renewed its lease: claim and renew both set
    the lease to a full Settings.lease_s from then (services/jobs/ledger.py)."""
    if task.state is not TaskState.running or task.lease_expires_at is None:
        return None
    return _aware(task.lease_expires_at) - dt.timedelta(seconds=settings.lease_s)


def lapsed(task: JobTask, settings: Settings, now: dt.datetime) -> bool:
    """Whether ``task`` is running but its process's heartbeat has lapsed (a dead worker);
    ``now`` on the database's clock, which the lease was written on."""
    beat_at = last_beat(task, settings)
    return beat_at is not None and (now - beat_at).total_seconds() > lapse_s(settings)


@dataclass(frozen=True)
class JobLiveness:
    """What a job's progress says about its workers."""

    lost: tuple[JobTask, ...]  # running steps whose process's heartbeat lapsed
    live_workers: int | None  # None: jobs run in the server's own process (no workers)
    now: dt.datetime  # when it was looked at, on the database's clock

    def warning(self) -> str | None:
        """One sentence, the same from one look to the next while nothing changes (`submit`
        prints a progress line each time it changes)."""
        parts = []
        if self.lost:
            held = ", ".join(f"{task.name} on {task.worker or 'an unknown worker'}" for task in self.lost)
            parts.append(f"{LOST} ({held})")
        if self.live_workers == 0:
            parts.append(NO_WORKER)
        return "; ".join(parts) or None

    def lost_view(self, settings: Settings) -> list[dict[str, object]]:
        """Each lost step, its worker and how long since its last heartbeat."""
        now = self.now
        return [
            {
                "step": task.name,
                "worker": task.worker,
                "silent_s": round((now - (last_beat(task, settings) or now)).total_seconds(), 1),
            }
            for task in self.lost
        ]


def of_job(session: Session, settings: Settings, job: Job) -> JobLiveness:
    """The job's steps whose worker was lost, and how many workers are alive to take them."""
    now = database_now(session)
    running = session.scalars(
        select(JobTask)
        .where(JobTask.job_id == job.id, JobTask.state == TaskState.running, JobTask.step != NOTIFY)
        .order_by(JobTask.id)
    ).all()
    lost = tuple(task for task in running if lapsed(task, settings, now))
    live_workers = len(live(session, settings)) if expects_workers(settings) else None
    return JobLiveness(lost, live_workers, now)


def _aware(moment: dt.datetime) -> dt.datetime:
    # SQLite hands back naive datetimes; they were written as UTC.
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)
