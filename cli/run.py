"""`lagtrace run`: validate everything, then screen, diagnose and store one job."""

from __future__ import annotations


from pathlib import Path

from services import migrate
from services.analysis import diagnose
from services.configs import default_matrix, parse_specs
from services.db import make_engine, make_session_factory
from services.errors import BadInput, LagtraceError
from services.executors import make_executor
from services.jobs import create_job, mark_finished, mark_running
from services.models import JobStatus
from services.report import build_report
from services.screen import Progress, screen
from services.settings import Settings


def run_job(
    settings: Settings,
    *,
    command: list[str],
    executor_name: str,
    specs: list[str],
    repeat: int,
    timeout_s: float | None,
    workdir: Path | None,
    project: str,
    progress: Progress,
) -> dict:
    # Everything the user gave is checked before anything is stored.
    if repeat < 1:
        raise BadInput(f"--repeat must be at least 1, not {repeat}")
    if timeout_s is not None and timeout_s <= 0:
        raise BadInput(f"--timeout must be a positive number of seconds, not {timeout_s:g}")
    workdir = (workdir or Path.cwd()).resolve()
    executor = make_executor(executor_name, settings)
    executor.check_command(command, workdir)
    available = executor.available_cpus()
    notes = []
    quota_problem = executor.quota_unsupported_reason()
    if specs:
        configs = parse_specs(specs, available)
        for config in configs:
            if config.cpus is not None and quota_problem:
                raise BadInput(f"--config {config.label}: CPU quotas cannot be enforced here: {quota_problem}")
    else:
        configs = default_matrix(available, quota_supported=quota_problem is None)
        if quota_problem:
            notes.append(f"the default cpus=0.5 configuration was left out: {quota_problem}")
    progress(f"{executor.name} executor, configurations: {', '.join(c.label for c in configs)}")

    engine = make_engine(settings)
    try:
        migrate.ensure_current(settings, engine)
    except migrate.SchemaNotCurrent as exc:
        raise LagtraceError(str(exc)) from None
    sessions = make_session_factory(engine)
    with sessions() as session:
        job = create_job(
            session, project=project, command=command, configs=configs, executor=executor.name,
            workdir=workdir, repeat=repeat, timeout_s=timeout_s, notes=notes,
        )
        mark_running(job)
        session.commit()
        progress(f"job {job.id} stored in {engine.url.render_as_string(hide_password=True)}")
        try:
            screen(session, job, executor, settings.thresholds, progress=progress, checkpoint=session.commit)
            diagnose(session, job, settings.thresholds)
            mark_finished(job, JobStatus.done)
        except KeyboardInterrupt:
            session.rollback()
            mark_finished(job, JobStatus.cancelled, "interrupted")
            session.commit()
            raise
        except Exception as exc:
            session.rollback()
            mark_finished(job, JobStatus.failed, f"{type(exc).__name__}: {exc}")
            session.commit()
            raise
        session.commit()
        report = build_report(job)
    engine.dispose()
    return report



