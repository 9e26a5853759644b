"""The steps of a service job, run by Celery tasks or by `lagtrace serve`'s own thread.

prepare (fetch the code, read .lagtrace.yml, plan) -> screen, one task per
configuration, possibly on different nodes -> finish (drill: evidence runs; diagnose)
-> notify (GitHub check run).

Each step claims its entry in the JobTask ledger first: a duplicate message, a step of
a cancelled job, or a step another worker holds under a live lease does nothing. This
module owns the transactions of a step (like cli/run.py does for `lagtrace run`): the
claim is committed before the long work so other workers see it, and the next steps
are sent only after the final commit.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from services.diagnose import diagnose
from services.errors import BadInput
from services.github.client import GitHubClient, GitHubError, check_run_body
from services.jobs import sources
from services.jobs.dispatch import FINISH, NOTIFY, PREPARE, SCREEN, Dispatcher, Step, send_all
from services.jobs.lifecycle import cpu_config, mark_finished, mark_running
from services.jobs.pipeline import plan_job
from services.jobs.report import build_report
from services.jobs.spec import enforce_policy
from services.jobs.submit import FINISHED, add_task, lease_from_now, notify_step
from services.measure import nodelock
from services.measure.artifacts import make_artifact_store
from services.measure.drill import drill
from services.measure.executors import Executor, make_executor
from services.measure.screen import screen
from services.models import Job, JobConfig, JobSource, JobStatus, JobTask, RunKind, TaskState, utcnow
from services.settings import Settings

log = logging.getLogger("lagtrace.steps")


def worker_name() -> str:
    # Host and process: two workers of one node are told apart in the ledger.
    return f"{socket.gethostname()}/{os.getpid()}"


class JobCancelled(Exception):
    """Raised at a checkpoint once the API cancelled the job: the screen stops there."""


def run_step(session_factory: sessionmaker[Session], settings: Settings, dispatcher: Dispatcher, step: Step) -> None:
    """One step in its own session: claim, work, commit, then send what comes next."""
    handler = HANDLERS[step.kind]
    with session_factory() as session:
        task = claim(session, settings, step)
        if task is None:
            return
        session.commit()
        try:
            follow = handler(session, settings, task)
        except Exception as exc:
            # A bug or a lost database connection: say so on the job rather than leave
            # the step to wait out its lease.
            session.rollback()
            follow = fail_job(session, settings, task.job, task, f"{task.name}: {type(exc).__name__}: {exc}")
            session.commit()
            send_all(dispatcher, follow)
            raise
        session.commit()
    send_all(dispatcher, follow)


def claim(session: Session, settings: Settings, step: Step) -> JobTask | None:
    task = session.scalar(
        select(JobTask).where(JobTask.job_id == step.job_id, JobTask.name == step.task_name).with_for_update()
    )
    if task is None or task.state in (TaskState.done, TaskState.failed, TaskState.cancelled):
        return None
    if task.attempts >= settings.task_max_attempts:
        return None  # the reconciler gives it up and says why
    if task.state is TaskState.running and _aware(task.lease_expires_at) > utcnow():
        log.info("%s of job %s is held by %s until %s", task.name, task.job_id, task.worker, task.lease_expires_at)
        return None
    task.state = TaskState.running
    task.attempts += 1
    task.worker = worker_name()
    task.lease_expires_at = lease_from_now(settings)
    return task


def _aware(moment: dt.datetime | None) -> dt.datetime:
    # SQLite hands back naive datetimes; they were written as UTC.
    if moment is None:
        return dt.datetime.min.replace(tzinfo=dt.UTC)
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def _progress(job: Job) -> Callable[[str], None]:
    return lambda line: log.info("job %s: %s", job.id, line)


def _executor(job: Job, source: JobSource, settings: Settings) -> Executor:
    # After prepare, job.executor is the one `auto` chose there, not `auto` again.
    return make_executor(
        job.executor,
        settings,
        image=source.image,
        progress=_progress(job),
        allowed=settings.allowed_executors,
        cache_scope=f"project-{job.project_id}",
    )


def _evidence_option(probes: list[str] | None) -> str | None:
    """The stored probe list as plan_job takes it (the `--evidence` text)."""
    if probes is None:
        return None
    return ",".join(probes) or "none"


def _stop_if_cancelled(session: Session, job: Job) -> Callable[[], None]:
    """A checkpoint: commit what was measured, then stop if the API cancelled the job."""

    def checkpoint() -> None:
        session.commit()
        session.refresh(job, ["status"])
        if job.status is JobStatus.cancelled:
            raise JobCancelled

    return checkpoint


@contextmanager
def _measuring(
    settings: Settings,
    job: Job,
    source: JobSource,
    name: str,
    cpuset: tuple[int, ...] | None,
    checkpoint: Callable[[], None],
) -> Iterator[tuple[Executor, Path]]:
    """A fresh checkout of the job's code and its executor, held with the node's measurement slot."""
    directory, _ = sources.checkout(source, settings, name)
    try:
        executor = _executor(job, source, settings)
        with nodelock.measurement_slot(settings, cpuset):
            checkpoint()  # the job may have been cancelled while this waited for the node
            # Inside the slot: installing dependencies (cached per node) burns CPU that
            # would disturb a run being measured beside it.
            executor.prepare(directory, _progress(job))
            yield executor, directory
    finally:
        sources.remove(directory)


def fail_job(session: Session, settings: Settings, job: Job, task: JobTask, error: str) -> list[Step]:
    task.state = TaskState.failed
    task.error = error
    if job.status in FINISHED:
        return []
    mark_finished(job, JobStatus.failed, error)
    for other in session.scalars(
        select(JobTask).where(
            JobTask.job_id == job.id, JobTask.id != task.id, JobTask.state.in_([TaskState.pending, TaskState.running])
        )
    ):
        other.state = TaskState.cancelled
    session.flush()
    return notify_step(session, job, settings)


def prepare(session: Session, settings: Settings, task: JobTask) -> list[Step]:
    job, source = task.job, session.get(JobSource, task.job_id)
    if job.status is not JobStatus.queued:
        task.state = TaskState.cancelled if job.status is JobStatus.cancelled else TaskState.done
        return []
    try:
        directory, commit = sources.checkout(source, settings, f"prepare-{task.id}")
        try:
            if commit:
                source.commit_sha = commit
            if source.from_repository_config:
                spec = enforce_policy(sources.repository_config(source, settings, directory), settings, job.project)
                job.command, job.repeat, job.timeout_s, job.executor = (
                    spec.command,
                    spec.repeat,
                    spec.timeout_s,
                    spec.executor,
                )
                job.probes, job.stall_after_s, source.image = spec.evidence, spec.stall_after_s, spec.image
                specs = spec.configs
            else:
                specs = [config.label for config in job.configs]
            executor = _executor(job, source, settings)
            plan = plan_job(
                executor,
                command=job.command,
                specs=specs,
                repeat=job.repeat,
                timeout_s=job.timeout_s,
                workdir=directory,
                evidence=_evidence_option(job.probes),
                stall_after_s=job.stall_after_s,
                progress=_progress(job),
            )
        finally:
            sources.remove(directory)
    except (BadInput, sources.SourceError) as exc:
        return fail_job(session, settings, job, task, str(exc))
    # The worker's own view of the machine decides: the default matrix, CPUs that exist.
    job.configs.clear()
    session.flush()  # the old rows go before new ones with the same labels arrive
    job.configs = [
        JobConfig(position=i, label=c.label, cpus=c.cpus, cpuset=c.cpuset_text) for i, c in enumerate(plan.configs)
    ]
    job.notes = [*plan.notes, *([nodelock.PACKING_NOTE] if settings.pack_disjoint_cores else [])]
    job.executor = executor.name
    job.probes, job.stall_after_s = plan.probes, plan.stall_after_s
    mark_running(job)
    task.state = TaskState.done
    session.flush()
    screens = [add_task(session, job, settings, SCREEN, f"{SCREEN}:{config.id}", config.id) for config in job.configs]
    return screens + notify_step(session, job, settings)


def screen_config(session: Session, settings: Settings, task: JobTask) -> list[Step]:
    job, config, source = task.job, task.config, session.get(JobSource, task.job_id)
    if job.status is not JobStatus.running:
        task.state = TaskState.cancelled
        return []
    # Runs of an earlier attempt that died are dropped: one attempt, one series.
    for run in list(config.runs):
        session.delete(run)
    session.flush()
    checkpoint = _stop_if_cancelled(session, job)
    try:
        slot = _measuring(settings, job, source, f"screen-{task.id}", cpu_config(config).cpuset, checkpoint)
        with slot as (executor, directory):
            screen(
                session,
                job,
                executor,
                settings.thresholds,
                checkpoint=checkpoint,
                configs=[config],
                workdir=directory,
                progress=_progress(job),
            )
    except JobCancelled:
        task.state = TaskState.cancelled
        return []
    except Exception as exc:
        session.rollback()
        return fail_job(session, settings, job, task, f"{config.label}: {type(exc).__name__}: {exc}")
    task.state = TaskState.done
    session.flush()
    # The last configuration to finish starts the diagnosis. Locking the job row orders
    # two finishers on different nodes: the second one sees the first one's commit.
    session.execute(select(Job.id).where(Job.id == job.id).with_for_update())
    remaining = session.scalar(
        select(func.count())
        .select_from(JobTask)
        .where(JobTask.job_id == job.id, JobTask.step == SCREEN, JobTask.state != TaskState.done)
    )
    if remaining:
        return []
    if session.scalar(select(JobTask.id).where(JobTask.job_id == job.id, JobTask.name == FINISH)):
        return []
    return [add_task(session, job, settings, FINISH)]


def finish(session: Session, settings: Settings, task: JobTask) -> list[Step]:
    """Drill (evidence runs in the slowest and fastest configuration), then diagnose."""
    job, source = task.job, session.get(JobSource, task.job_id)
    if job.status is not JobStatus.running:
        task.state = TaskState.cancelled
        return []
    # An earlier attempt that died leaves evidence runs behind: this attempt starts over.
    for old in list(job.evidence):
        session.delete(old)
    for config in job.configs:
        for run in [r for r in config.runs if r.kind is RunKind.evidence]:
            session.delete(run)
    session.flush()
    checkpoint = _stop_if_cancelled(session, job)
    try:
        # Evidence runs use the slowest and the fastest configuration: the whole node.
        with _measuring(settings, job, source, f"finish-{task.id}", None, checkpoint) as (executor, directory):
            drill(
                session,
                job,
                executor,
                settings.thresholds,
                make_artifact_store(settings),
                probes=job.probes,
                stall_after_s=job.stall_after_s,
                checkpoint=checkpoint,
                workdir=directory,
                progress=_progress(job),
            )
    except JobCancelled:
        task.state = TaskState.cancelled
        return []
    diagnose(session, job, settings.thresholds)
    mark_finished(job, JobStatus.done)
    task.state = TaskState.done
    session.flush()
    return notify_step(session, job, settings)


def notify(session: Session, settings: Settings, task: JobTask) -> list[Step]:
    """Bring the GitHub check run to the job's current state (create it the first time)."""
    job = task.job
    source = session.scalar(select(JobSource).where(JobSource.job_id == job.id).with_for_update())
    report = build_report(job) if job.status in FINISHED else None
    body = check_run_body(settings, job, source, report)
    client = GitHubClient(settings)
    try:
        if source.github_check_run_id:
            client.update_check_run(source.github_repository, source.github_check_run_id, body)
        else:
            source.github_check_run_id = client.create_check_run(source.github_repository, body)
    except GitHubError as exc:
        task.error = str(exc)
        if task.attempts >= settings.task_max_attempts:
            task.state = TaskState.failed
            job.notes = [*job.notes, f"the GitHub check run could not be updated: {exc}"]
        else:
            # Back to the ledger: the reconciler sends it again once this backoff is over.
            task.state = TaskState.pending
            task.lease_expires_at = utcnow() + dt.timedelta(seconds=30 * task.attempts)
        return []
    task.state = TaskState.done
    return []


HANDLERS: dict[str, Callable[[Session, Settings, JobTask], list[Step]]] = {
    PREPARE: prepare,
    SCREEN: screen_config,
    FINISH: finish,
    NOTIFY: notify,
}
