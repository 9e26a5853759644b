"""`lagtrace run`: plan, store, execute and report one job in this process.

The job goes through the same engine as a service job (services.jobs.engine), without
the ledger: this process is the only one that ever runs it.
"""

from __future__ import annotations

from pathlib import Path

from services import migrate
from services.db import make_engine, make_session_factory
from services.errors import LagtraceError
from services.jobs.engine import Progress, execute_job
from services.jobs.lifecycle import create_job
from services.jobs.plan import plan_job
from services.jobs.report import build_report
from services.jobs.report_schema import Report
from services.measure.executors import make_executor
from services.models import Job, JobKind
from services.settings import Settings


def run_job(
    settings: Settings,
    *,
    command: list[str],
    executor_name: str,
    image: str | None = None,
    specs: list[str],
    repeat: int,
    timeout_s: float | None,
    workdir: Path | None,
    evidence: str | None = None,
    stall_after_s: float | None = None,
    budget_s: float | None = None,
    kind: str = JobKind.matrix.value,
    project: str,
    progress: Progress,
) -> Report:
    executor = make_executor(executor_name, settings, image=image, progress=progress)
    plan = plan_job(
        executor,
        command=command,
        specs=specs,
        repeat=repeat,
        timeout_s=timeout_s,
        workdir=(workdir or Path.cwd()).resolve(),
        evidence=evidence,
        stall_after_s=stall_after_s,
        progress=progress,
        budget_s=budget_s,
    )
    progress(f"{executor.name} executor, configurations: {', '.join(c.label for c in plan.configs)}")
    engine = make_engine(settings)
    try:
        migrate.ensure_current(settings, engine)
    except migrate.SchemaNotCurrent as exc:
        raise LagtraceError(str(exc)) from None
    try:
        with make_session_factory(engine)() as session:
            job = create_job(
                session,
                project=project,
                command=plan.command,
                configs=plan.configs,
                executor=executor.name,
                workdir=plan.workdir,
                repeat=plan.repeat,
                timeout_s=plan.timeout_s,
                notes=plan.notes,
                probes=plan.probes,
                stall_after_s=plan.stall_after_s,
                budget_s=plan.budget_s,
                kind=JobKind(kind),
            )
            session.commit()
            progress(f"job {job.id} stored in {engine.url.render_as_string(hide_password=True)}")
            try:
                execute_job(session, job, executor, settings, progress=progress, checkpoint=session.commit)
            except Exception as exc:
                # The job is stored as failed, with why: its report says so first (stdout),
                # rather than stdout staying empty and the reason on stderr alone.
                raise JobFailed(_report_of_failed(job, settings), exc) from exc
            return build_report(job, settings.thresholds)
    finally:
        engine.dispose()


class JobFailed(Exception):
    """The job failed while it ran: ``report`` is its report (None where even that failed)."""

    def __init__(self, report: Report | None, cause: Exception):
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.report = report
        self.cause = cause


def _report_of_failed(job: Job, settings: Settings) -> Report | None:
    try:
        return build_report(job, settings.thresholds)
    except Exception:  # a report cannot be made of what it stored: stderr still says why
        return None
