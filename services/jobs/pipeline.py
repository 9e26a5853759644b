"""One job from request to findings: validate, plan the matrix, screen, drill, diagnose.

Shared by every entry point (the CLI now; the API, the workers and reruns later), so a
job means the same thing wherever it comes from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.orm import Session

from services.diagnose import diagnose
from services.errors import BadInput
from services.jobs.lifecycle import mark_finished, mark_running
from services.measure.artifacts import make_artifact_store
from services.measure.configs import CpuConfig, default_matrix, parse_specs
from services.measure.drill import drill, parse_evidence
from services.measure.executors.base import Executor
from services.measure.screen import Progress, screen
from services.models import Job, JobStatus
from services.settings import Settings


@dataclass
class JobPlan:
    command: list[str]
    workdir: Path
    configs: list[CpuConfig]
    repeat: int
    timeout_s: float | None
    notes: list[str] = field(default_factory=list)
    probes: list[str] | None = None  # probe names; None: the default (see services.measure.drill)
    stall_after_s: float | None = None


def plan_job(
    executor: Executor,
    *,
    command: list[str],
    specs: list[str],
    repeat: int,
    timeout_s: float | None,
    workdir: Path,
    evidence: str | None = None,
    stall_after_s: float | None = None,
    progress: Progress = lambda message: None,
) -> JobPlan:
    """Check everything the user gave before anything is stored; BadInput says what is wrong."""
    if repeat < 1:
        raise BadInput(f"--repeat must be at least 1, not {repeat}")
    if timeout_s is not None and timeout_s <= 0:
        raise BadInput(f"--timeout must be a positive number of seconds, not {timeout_s:g}")
    if stall_after_s is not None and stall_after_s <= 0:
        raise BadInput(f"--stall-after must be a positive number of seconds, not {stall_after_s:g}")
    if stall_after_s is not None and timeout_s is not None and stall_after_s >= timeout_s:
        raise BadInput(
            f"--stall-after {stall_after_s:g} must be below --timeout {timeout_s:g}: "
            "the snapshot is taken while the run is still going"
        )
    probes = parse_evidence(evidence)
    # Before the command check: the program may come from the dependencies installed here.
    executor.prepare(workdir, progress)
    executor.check_command(command, workdir)
    available = executor.available_cpus()
    quota_problem = executor.quota_unsupported_reason()
    notes = []
    if specs:
        configs = parse_specs(specs, available)
        for config in configs:
            if config.cpus is not None and quota_problem:
                raise BadInput(f"--config {config.label}: CPU quotas cannot be enforced here: {quota_problem}")
    else:
        configs = default_matrix(available, quota_supported=quota_problem is None)
        if quota_problem:
            notes.append(f"the default cpus=0.5 configuration was left out: {quota_problem}")
    return JobPlan(command, workdir, configs, repeat, timeout_s, notes, probes, stall_after_s)


def execute_job(
    session: Session,
    job: Job,
    executor: Executor,
    settings: Settings,
    *,
    progress: Progress = lambda message: None,
    checkpoint: Callable[[], None] = lambda: None,
) -> None:
    """Screen and diagnose a stored job, leaving it done, failed or cancelled.

    ``checkpoint`` is called after each stored run and at each change of state (the
    caller passes ``session.commit``), so a job that dies keeps what it measured.
    """
    mark_running(job)
    checkpoint()
    try:
        screen(session, job, executor, settings.thresholds, progress=progress, checkpoint=checkpoint)
        drill(
            session,
            job,
            executor,
            settings.thresholds,
            make_artifact_store(settings),
            probes=job.probes,
            stall_after_s=job.stall_after_s,
            progress=progress,
            checkpoint=checkpoint,
        )
        diagnose(session, job, settings.thresholds)
        mark_finished(job, JobStatus.done)
    except KeyboardInterrupt:
        session.rollback()
        mark_finished(job, JobStatus.cancelled, "interrupted")
        checkpoint()
        raise
    except Exception as exc:
        session.rollback()
        mark_finished(job, JobStatus.failed, f"{type(exc).__name__}: {exc}")
        checkpoint()
        raise
    checkpoint()
