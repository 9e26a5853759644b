"""A job's states and every change of them: create, run, finish, fail, cancel.

queued -> running -> done | failed | cancelled. Callers own the transaction; a change
that GitHub should hear about records its notify step (sent after commit).
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.errors import BadInput, Conflict
from services.jobs.ledger import cancel_open_tasks, notify_step
from services.measure.configs import CpuConfig
from services.models import Job, JobConfig, JobKind, JobStatus, JobTask, Project, TaskState, utcnow
from services.settings import Settings

FINISHED = (JobStatus.done, JobStatus.failed, JobStatus.cancelled)


def get_or_create_project(session: Session, name: str) -> Project:
    project = session.scalar(select(Project).where(Project.name == name))
    if project is None:
        project = Project(name=name)
        session.add(project)
        session.flush()
    return project


def create_job(
    session: Session,
    *,
    project: str,
    command: list[str],
    configs: list[CpuConfig],
    executor: str,
    workdir: Path | None,
    repeat: int,
    timeout_s: float | None,
    notes: list[str] | None = None,
    source: str = "cli",
    probes: list[str] | None = None,
    stall_after_s: float | None = None,
    budget_s: float | None = None,
    kind: JobKind = JobKind.matrix,
) -> Job:
    job = Job(
        project=get_or_create_project(session, project),
        source=source,
        command=list(command),
        executor=executor,
        workdir=str(workdir) if workdir is not None else None,  # service jobs: one checkout per step
        repeat=repeat,
        timeout_s=timeout_s,
        notes=list(notes or []),
        probes=probes,
        stall_after_s=stall_after_s,
        budget_s=budget_s,
        kind=kind,
        configs=config_rows(configs),
    )
    session.add(job)
    session.flush()
    return job


def run_timeout(settings: Settings, requested: float | None) -> float:
    """The timeout each run of a service job gets: the one asked for, else the installation's
    default; never above its maximum, so no run (`sleep 100000`) holds a node for good."""
    if requested is None:
        return settings.run_timeout_s
    if requested > settings.run_timeout_max_s:
        raise BadInput(
            f"timeout {requested:g} s is above this installation's maximum of {settings.run_timeout_max_s:g} s "
            "(LAGTRACE_RUN_TIMEOUT_MAX_S)",
            field="timeout_s",
        )
    return requested


def config_rows(configs: list[CpuConfig]) -> list[JobConfig]:
    return [JobConfig(position=i, label=c.label, cpus=c.cpus, cpuset=c.cpuset_text) for i, c in enumerate(configs)]


def mark_running(job: Job) -> None:
    job.status = JobStatus.running
    job.started_at = utcnow()


def mark_finished(job: Job, status: JobStatus, error: str | None = None) -> None:
    job.status = status
    job.error = error
    job.finished_at = utcnow()


def finish(session: Session, settings: Settings, job: Job) -> None:
    """Done: the findings are stored; GitHub hears of it."""
    mark_finished(job, JobStatus.done)
    session.flush()
    notify_step(session, job, settings)


def fail_job(session: Session, settings: Settings, job: Job, task: JobTask | None, error: str) -> None:
    """The job failed (``task`` failing it); its other open steps are dropped."""
    if task is not None:
        task.state = TaskState.failed
        task.error = error
    if job.status in FINISHED:
        return
    mark_finished(job, JobStatus.failed, error)
    cancel_open_tasks(session, job, keep=task)
    session.flush()
    notify_step(session, job, settings)


def cancel_job(session: Session, settings: Settings, job: Job, actor: str) -> None:
    """Stop a job: queued steps are dropped, a running screen stops after its current run."""
    if job.status in FINISHED:
        raise Conflict(f"job {job.id} is already {job.status.value}")
    mark_finished(job, JobStatus.cancelled, f"cancelled by {actor}")
    cancel_open_tasks(session, job)
    session.flush()
    notify_step(session, job, settings)
