"""Scheduled matrix jobs: the branches the project keeps history on get a matrix job every
``matrix_every_h`` hours (`.lagtrace.yml`; docs/guides/github.md, scheduled matrix jobs).

A gate compares one run of each test with the runs finished jobs stored of it on the base
branch (services/jobs/history.py); gates alone store little of it, and only for the tests
they ran once. A scheduled matrix job keeps that history fed: every configuration, every
test, on the branch's latest pushed commit.

- ``record``: a push job on such a branch reading its `.lagtrace.yml` (services/jobs/engine.py
  ``prepare_step``) stores the schedule and itself as the job the next one is built from;
- ``create_due``: the periodic pass (the reconciler's: services/jobs/reconcile.py) creates,
  for each schedule that is due, a matrix job with trigger ``schedule`` the way a rerun is
  built (services/jobs/submit.py ``job_on_source_of``). Due: no matrix job of that command
  on that branch created within ``every_h`` (a matrix job by any trigger resets the clock;
  a gate is no matrix job) nor still queued or running, and no attempt of the pass itself
  within it. ``every_h`` is at least the server's ``matrix_min_interval_h``, whatever a
  schedule stored before it was raised says.
"""

from __future__ import annotations

import datetime as dt
import logging

from sqlalchemy import or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from services.diagnose.change_points import branch_of, on_branch
from services.errors import BadInput, Conflict, NotFound
from services.jobs.submit import job_on_source_of
from services.models import Job, JobKind, JobSource, JobStatus, MatrixSchedule, database_now, utcnow
from services.settings import Settings

log = logging.getLogger("lagtrace.schedule")

TRIGGER = "schedule"
UNFINISHED = (JobStatus.queued, JobStatus.running)


def record(session: Session, settings: Settings, job: Job, source: JobSource, every_h: float | None) -> None:
    """Store what ``job``'s `.lagtrace.yml` says of the schedule, where ``job`` is a push to a
    branch the project keeps history on (Settings.change_point_branches), and is the newest
    push to it that has said so: a push prepared late does not undo a later one's."""
    branch = branch_of(source.ref, source.branch)
    if job.trigger != "push" or branch not in settings.change_point_branches:
        return
    schedule = _locked(session, job.project_id, branch)
    if schedule is None:
        try:
            with session.begin_nested():
                schedule = MatrixSchedule(project_id=job.project_id, branch=branch, job_id=job.id)
                session.add(schedule)
        except IntegrityError:  # another push stored it meanwhile (the unique constraint)
            schedule = _locked(session, job.project_id, branch)
        if schedule is None:
            return
    elif schedule.job_id is not None and schedule.job_id > job.id:
        return
    schedule.every_h, schedule.job_id, schedule.updated_at = every_h, job.id, utcnow()
    session.flush()


def _locked(session: Session, project_id: int, branch: str) -> MatrixSchedule | None:
    return session.scalar(
        select(MatrixSchedule)
        .where(MatrixSchedule.project_id == project_id, MatrixSchedule.branch == branch)
        .with_for_update()
    )


def last_matrix_at(
    session: Session, schedule: MatrixSchedule, command: list[str], since: dt.datetime
) -> dt.datetime | None:
    """When the newest matrix job of ``command`` on the schedule's branch was created, if
    it was at or after ``since`` or is still queued or running (one waiting for a worker, or
    slower than every_h, is not doubled); None where none was."""
    query = (
        select(Job.created_at, Job.command)
        .join(JobSource, JobSource.job_id == Job.id)
        .where(
            Job.project_id == schedule.project_id,
            Job.kind == JobKind.matrix,
            or_(Job.created_at >= since, Job.status.in_(UNFINISHED)),
            on_branch(schedule.branch),
        )
        .order_by(Job.created_at.desc(), Job.id.desc())
    )
    # The command is JSON, which PostgreSQL cannot compare: compared here (as history.py does).
    for created_at, stored_command in session.execute(query):
        if stored_command == command:
            return created_at
    return None


def due(session: Session, settings: Settings, schedule: MatrixSchedule, now: dt.datetime) -> Job | None:
    """The job a due schedule's matrix job is built from; None where it is not due (or
    nothing to build from: no hours, or its push job deleted)."""
    if schedule.every_h is None or schedule.job_id is None:
        return None
    since = now - dt.timedelta(hours=max(schedule.every_h, settings.matrix_min_interval_h))
    if schedule.attempted_at is not None and _aware(schedule.attempted_at) > since:
        return None
    earlier = session.get(Job, schedule.job_id)
    if earlier is None or not earlier.command:
        return None
    return None if last_matrix_at(session, schedule, list(earlier.command), since) is not None else earlier


def create_due(session: Session, settings: Settings, *, now: dt.datetime | None = None) -> list[Job]:
    """Create each due schedule's matrix job; its prepare step is sent when the caller
    commits (outbox). Two passes at once (two beats by mistake) create one job: on
    PostgreSQL each schedule is checked and its job created under its row's lock, which
    another pass skips; a pass that takes the row after another committed finds that
    one's job and attempt; on SQLite, ``_claim`` (tests/services/jobs/test_schedule.py)."""
    # The database's clock: the beat's host may be off, and a job's age is the database's.
    now = now or database_now(session)
    created: list[Job] = []
    schedules = session.scalars(
        select(MatrixSchedule)
        .where(MatrixSchedule.every_h.is_not(None))
        .order_by(MatrixSchedule.id)
        .with_for_update(skip_locked=True)
        .execution_options(populate_existing=True)
    ).all()
    for schedule in schedules:
        earlier = due(session, settings, schedule, now)
        if earlier is None or not _claim(session, schedule, now):
            continue
        try:
            with session.begin_nested():
                job = job_on_source_of(session, settings, earlier, configs=[], origin=TRIGGER)
                job.trigger = TRIGGER
        except (BadInput, Conflict, NotFound) as exc:
            # What the server no longer allows (an executor, an image): said on the
            # schedule, tried again after every_h or at the next push.
            schedule.error = f"job {earlier.id}: {exc}"
            log.warning("no scheduled matrix job for %s: %s", schedule.branch, schedule.error)
            continue
        schedule.error = None
        created.append(job)
        log.info("scheduled matrix job %d on %s (built from job %d)", job.id, schedule.branch, earlier.id)
    session.flush()
    return created


def _claim(session: Session, schedule: MatrixSchedule, now: dt.datetime) -> bool:
    """Stamp the attempt, if no other pass has since it was read. SQLite has no row locks
    (``skip_locked`` is PostgreSQL's): this write waits for another pass's to commit, then
    finds its stamp, so the second pass does not create a job the first created."""
    seen = MatrixSchedule.attempted_at
    claimed = session.execute(
        update(MatrixSchedule)
        .where(
            MatrixSchedule.id == schedule.id,
            seen.is_(None) if schedule.attempted_at is None else seen == schedule.attempted_at,
        )
        .values(attempted_at=now)
        .execution_options(synchronize_session=False)
    )
    if claimed.rowcount != 1:  # type: ignore[attr-defined]
        return False
    session.refresh(schedule, ["attempted_at"])
    return True


def _aware(moment: dt.datetime) -> dt.datetime:
    # SQLite returns the stored time without its zone (stored as UTC).
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)
