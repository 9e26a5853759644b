"""Creating jobs and moving them through their states. Callers own the transaction."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.measure.configs import CpuConfig, parse_cpulist
from services.models import Job, JobConfig, JobStatus, Project, utcnow


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
) -> Job:
    job = Job(
        project=get_or_create_project(session, project),
        source=source,
        command=list(command),
        executor=executor,
        workdir=str(workdir) if workdir is not None else None,  # service jobs: one checkout per task
        repeat=repeat,
        timeout_s=timeout_s,
        notes=list(notes or []),
        probes=probes,
        stall_after_s=stall_after_s,
        configs=[
            JobConfig(position=i, label=c.label, cpus=c.cpus, cpuset=c.cpuset_text) for i, c in enumerate(configs)
        ],
    )
    session.add(job)
    session.flush()
    return job


def cpu_config(job_config: JobConfig) -> CpuConfig:
    return CpuConfig(
        label=job_config.label,
        cpus=job_config.cpus,
        cpuset=parse_cpulist(job_config.cpuset) if job_config.cpuset else None,
    )


def mark_running(job: Job) -> None:
    job.status = JobStatus.running
    job.started_at = utcnow()


def mark_finished(job: Job, status: JobStatus, error: str | None = None) -> None:
    job.status = status
    job.error = error
    job.finished_at = utcnow()
