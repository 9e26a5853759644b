"""The periodic reconciler: steps whose lease expired are sent again, or given up, and the
due scheduled matrix jobs are created (services/jobs/schedule.py).

The process running a step renews its lease every heartbeat (Settings.heartbeat_interval_s),
so an expired lease on a running step means its process is gone (killed, OOM, node lost);
on a pending step, that its message was lost (a Redis restart) or is still queued behind
others, whence one more message, which claims nothing if the first arrives. Redis
redelivering an unacknowledged message meanwhile is harmless because every step claims
its ledger entry first. A step is sent again at most Settings.recovery_bound_s after its
process died or its message was lost.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.jobs import ledger, schedule
from services.jobs.dispatch import NOTIFY, Step
from services.jobs.lifecycle import FINISHED, fail_job
from services.models import JobTask, TaskState, database_now
from services.settings import Settings


def reconcile(session: Session, settings: Settings, *, orphaned: bool = False) -> list[Step]:
    """Put due steps back in the ledger; they are sent when the caller commits (outbox).
    Returns what will be resent. ``orphaned``: every unfinished step is due (the embedded
    server starting up is the only one that ever ran them, so none is in flight)."""
    unfinished = JobTask.state.in_([TaskState.pending, TaskState.running])
    due = unfinished if orphaned else unfinished & (JobTask.lease_expires_at < database_now(session))
    expired = session.scalars(
        select(JobTask)
        .where(due)
        .order_by(JobTask.id)
        # Two reconcilers (two beat processes by mistake) split the work instead of doubling it.
        .with_for_update(skip_locked=True)
    ).all()
    steps: list[Step] = []
    for task in expired:
        job = task.job
        if job.status in FINISHED and task.step != NOTIFY:
            task.state = TaskState.cancelled
        elif task.attempts >= settings.task_max_attempts and task.step == NOTIFY:
            # GitHub being unreachable is no reason to fail the measurement.
            task.state = TaskState.failed
        elif task.attempts >= settings.task_max_attempts:
            fail_job(
                session,
                settings,
                job,
                task,
                f"{task.name} was started {task.attempts} times and never finished (worker lost or killed); giving up",
            )
        else:
            steps.append(ledger.resend(session, settings, task))
    # The beat's pass and `lagtrace serve`'s loop are this one: it also creates the due
    # scheduled matrix jobs, whose prepare steps are sent like the rest on commit.
    schedule.create_due(session, settings)
    session.flush()
    return steps
