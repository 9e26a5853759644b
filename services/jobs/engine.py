"""The job engine: one state machine for every way a job runs.

    prepare -> screen -> drill -> diagnose -> notify

``lagtrace run`` drives it in one process (``execute_job``, after services/jobs/plan.py
``plan_job``); the service drives the same phases as ledger steps (``HANDLERS``, run under a lease by
services/jobs/lease.py ``run_step``), by a Celery worker or by `lagtrace serve`'s own
thread: prepare (fetch the code, read .lagtrace.yml, plan), screen (every configuration,
interleaved, on one node), finish (drill, then diagnose), notify (the GitHub check run,
services/github/notify.py). Either way the screen holds the node's measurement lock
from its first run to its last, so its configurations are compared on one machine under
one load, and the drill is handed its targets here, from what the timing rules found
(services/jobs/drill_targets.py).

Each service step claims its ledger entry first and commits the claim before the long
work; the steps it records are sent by the outbox once its last commit succeeds.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.diagnose import change_points, diagnose
from services.errors import BadInput
from services.jobs import forecast, gate, ledger, lifecycle, pull_requests, schedule, shards, sources, summaries
from services.jobs.bisect_jobs import bisect_regressions
from services.jobs.commit_profiles import profile_phase
from services.jobs.confirm_phase import confirm_phase
from services.jobs.dispatch import FINISH, PREPARE, SCREEN
from services.jobs.drill_targets import census_suspects, drill_targets
from services.jobs.lease import Handler, hold
from services.jobs.node_class import NodeClass
from services.jobs.plan import plan_job
from services.jobs.spec import RepositoryConfig, enforce_policy
from services.jobs.workspace import (
    Checkpoint,
    Progress,
    base_side,
    checkout,
    drill_lock,
    executor_for,
    progress_of,
    screen_lock,
    stored_source,
)
from services.measure import budget, nodelock
from services.measure.artifacts import make_artifact_store
from services.measure.drill import Target, drill, evidence_option, no_targets
from services.measure.executors import Executor
from services.measure.screen import BaseSide, screen
from services.measure.survey_census import SurveyCensus, survey_census
from services.models import Job, JobKind, JobStatus, JobTask, RunKind, TaskState
from services.settings import Settings


def _quiet(message: str) -> None:
    pass


def _nothing() -> None:
    pass


# --- screen, drill, diagnose: the phases both drivers run --------------------------------


def screen_phase(
    session: Session,
    settings: Settings,
    job: Job,
    executor: Executor,
    *,
    workdir: Path,
    progress: Progress = _quiet,
    checkpoint: Checkpoint = _nothing,
    base: BaseSide | None = None,
) -> None:
    """Every configuration, interleaved (with a pull request's base commit when ``base``);
    runs of an earlier attempt that died are dropped first."""
    for config in job.configs:
        for run in [r for r in config.runs if r.kind is not RunKind.evidence]:
            session.delete(run)
    session.flush()
    budget.forget(job)  # a shard's own record (shards.ShardJob): the others' are theirs
    if not isinstance(job, shards.ShardJob):
        gate.calibrate(session, job, executor, workdir=workdir)
        checkpoint()
    matrix: Job | None = job
    if job.kind is JobKind.gate:
        matrix = gate_phase(session, settings, job, executor, workdir=workdir, progress=progress, checkpoint=checkpoint)
    if matrix is not None:
        screen(
            session,
            matrix,
            executor,
            settings.thresholds,
            workdir=workdir,
            progress=progress,
            checkpoint=checkpoint,
            base=base,
            census=SurveyCensus(
                session, matrix, executor, settings.thresholds, make_artifact_store(settings), progress
            ),
        )
    budget.record(job, settings.thresholds)


def gate_phase(
    session: Session,
    settings: Settings,
    job: Job,
    executor: Executor,
    *,
    workdir: Path,
    progress: Progress,
    checkpoint: Checkpoint,
) -> Job | None:
    """A gate job's run against history (services/jobs/gate.py); what the matrix then
    screens: the job narrowed to the tests that went on, None when none did, or the whole
    job where the gate declined (services/jobs/gate.py GateDeclined)."""
    job.gate = None
    branch = gate.history_branch(session, job, settings.change_point_branches)
    try:
        result = gate.run_gate(
            session,
            job,
            executor,
            settings.thresholds,
            workdir=workdir,
            branch=branch,
            progress=progress,
            checkpoint=checkpoint,
        )
    except gate.GateDeclined as declined:
        note = f"the gate did not judge against history: {declined}; every configuration was screened"
        progress(f"gate: {note}")
        if note not in job.notes:
            job.notes = [*job.notes, note]
        return job
    job.gate = result.as_json()
    going_on = result.going_on()
    if not going_on:
        progress(f"gate: nothing moved against history in {result.config}: no other configuration run")
        return None
    progress(f"gate: {len(going_on)} tests go on to every configuration")
    return gate.screened(job, workdir)


def drill_phase(
    session: Session,
    settings: Settings,
    job: Job,
    executor: Executor,
    *,
    workdir: Path,
    progress: Progress = _quiet,
    checkpoint: Checkpoint = _nothing,
) -> int:
    """Evidence runs where the screen found something; evidence of an earlier attempt is dropped first.

    ``job.probes`` None is the default: every probe, but only where the screen found
    something. Given explicitly, the whole command is drilled whatever the screen found.
    """
    # What a shard's step took on its own node (its census) stays; the rest is this step's.
    taken_in_survey = survey_census(job)
    for old in [evidence for evidence in job.evidence if evidence not in taken_in_survey]:
        session.delete(old)
    for config in job.configs:
        for run in [r for r in config.runs if r.kind is RunKind.evidence and r.shard is None]:
            session.delete(run)
    session.flush()
    budget.forget(job, budget.DRILL)
    if job.probes == []:
        return 0
    # After a gate, what its matrix screened: the drill traces the tests that went on,
    # never the whole suite for one test's move (tests/unit/services/jobs/test_gate_screened.py).
    job, whole = gate.screened(job, workdir), job
    store = make_artifact_store(settings)

    def drill_these(targets: list[Target]) -> int:
        return drill(
            session,
            job,
            executor,
            settings.thresholds,
            store,
            targets,
            probes=job.probes,
            stall_after_s=job.stall_after_s,
            workdir=workdir,
            progress=progress,
            checkpoint=checkpoint,
        )

    # What the screen flagged first, then what the census suspects: under a budget,
    # explaining a finding comes before looking for what no timing shows.
    left_out: list[str] = []
    chosen = drill_targets(job, settings, workdir, left_out)
    count = drill_these(chosen)
    suspects = census_suspects(job) if job.probes is None else []
    if suspects:
        drilled = {target.test_id for target in chosen}
        left_out = []
        later = [
            target
            for target in drill_targets(job, settings, workdir, left_out, suspects)
            if target.test_id in suspects and target.test_id not in drilled
        ]
        count += drill_these(later)
        chosen += later
    if left_out:
        job.notes = [
            *job.notes,
            f"{len(left_out)} more flagged tests were not drilled (at most {settings.thresholds.drill_max_tests} "
            f"per job, the most severe first): {', '.join(left_out[:10])}{' ...' if len(left_out) > 10 else ''}; "
            "rerun them by name for evidence",
        ]
    if not chosen:
        job.notes = [*job.notes, no_targets(job)]
    confirm_phase(session, settings, whole, executor, workdir=workdir, progress=progress, checkpoint=checkpoint)
    return count


def diagnose_phase(session: Session, settings: Settings, job: Job) -> None:
    """The rules over everything stored (and a pull request's comparison with its base); the job is done."""
    # Stored with the job: its report says which numbers made its verdicts, whatever the
    # workers' environment says later.
    job.thresholds = settings.thresholds.model_dump(mode="json")
    diagnose(session, job, settings.thresholds)
    pull_requests.record(session, job, settings.thresholds)
    gate.record_findings(session, job, settings.thresholds)
    lifecycle.finish(session, settings, job)
    # The branch's history now ends with this job: a step it completes is reported on
    # the push that made it, whose check run is brought up to date.
    earlier: dict[int, Job] = {}
    steps = change_points.after_job(session, job, settings.thresholds, settings.change_point_branches)
    for finding in steps:
        if finding.job_id != job.id:
            ledger.renotify_step(session, finding.job, settings, f"slower_since:{finding.fingerprint[:16]}")
            earlier[finding.job_id] = finding.job
    # Which commit slowed a test this push showed slower: before the job's report is made,
    # whose notes name the bisect jobs.
    bisect_regressions(session, settings, job, steps)
    # What the pages read, made now and not in a page view: this job's report, its
    # problems' sums, the catalogue's summary, and earlier jobs' reports that just gained a finding.
    summaries.after_finish(session, job, settings.thresholds, earlier.values())


# --- driver 1: one process (`lagtrace run`) ----------------------------------------------


def execute_job(
    session: Session,
    job: Job,
    executor: Executor,
    settings: Settings,
    *,
    progress: Progress = _quiet,
    checkpoint: Checkpoint = _nothing,
) -> None:
    """Screen, drill and diagnose a stored, planned job here, leaving it done, failed or cancelled.

    ``checkpoint`` is called after each stored run and at each change of state (the
    caller passes ``session.commit``), so a job that dies keeps what it measured.
    """
    workdir = Path(job.workdir or ".")
    lifecycle.mark_running(job)
    checkpoint = forecast.checkpointing(session, settings.thresholds, job, checkpoint, progress)
    checkpoint()
    try:
        with screen_lock(settings, job, progress):
            NodeClass.of_executor(executor).record(job)
            checkpoint()  # committed now: the job's row is not held locked through the first run
            screen_phase(session, settings, job, executor, workdir=workdir, progress=progress, checkpoint=checkpoint)
        with drill_lock(settings, job, progress):
            drill_phase(session, settings, job, executor, workdir=workdir, progress=progress, checkpoint=checkpoint)
        diagnose_phase(session, settings, job)
    except KeyboardInterrupt:
        session.rollback()
        lifecycle.mark_finished(job, JobStatus.cancelled, "interrupted")
        checkpoint()
        raise
    except Exception as exc:
        session.rollback()
        lifecycle.fail_job(session, settings, job, None, f"{type(exc).__name__}: {exc}")
        checkpoint()
        raise
    checkpoint()


# --- driver 2: ledger steps (Celery workers, `lagtrace serve`'s thread) --------------------
# Each runs under its lease (services/jobs/lease.py run_step) in a workspace of its own
# (services/jobs/workspace.py); a checkpoint commits what was measured while the lease holds.


class JobCancelled(Exception):
    """Raised at a checkpoint once the job was cancelled: the step stops there."""


def stop_if_cancelled(session: Session, job: Job, task: JobTask) -> Checkpoint:
    """A checkpoint: commit what was measured (if the step is still ours), then stop if the
    job was cancelled meanwhile."""

    def checkpoint() -> None:
        hold(session, task)
        session.commit()
        session.refresh(job, ["status"])
        if job.status is JobStatus.cancelled:
            raise JobCancelled

    return checkpoint


def prepare_step(session: Session, settings: Settings, task: JobTask) -> None:
    job, source = task.job, stored_source(session, task.job)
    if job.status is not JobStatus.queued:
        task.state = TaskState.cancelled if job.status is JobStatus.cancelled else TaskState.done
        return
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
                job.budget_s = spec.budget_s
                job.kind = JobKind(spec.kind)
                source.fail_on = spec.fail_on if isinstance(spec, RepositoryConfig) else None
                source.bisect_regressions = spec.bisect_regressions if isinstance(spec, RepositoryConfig) else None
                every_h = spec.matrix_every_h if isinstance(spec, RepositoryConfig) else None
                specs = spec.configs
            else:
                specs = [config.label for config in job.configs]
            job.timeout_s = lifecycle.run_timeout(settings, job.timeout_s)
            executor = executor_for(job, source, settings)
            plan = plan_job(
                executor,
                command=job.command,
                specs=specs,
                repeat=job.repeat,
                timeout_s=job.timeout_s,
                workdir=directory,
                evidence=evidence_option(job.probes),
                stall_after_s=job.stall_after_s,
                progress=progress_of(job),
                machine="this worker",
                budget_s=job.budget_s,
            )
            split, split_note = shards.plan(session, settings, job, executor, directory, progress=progress_of(job))
        finally:
            sources.remove(directory)
    except (BadInput, sources.SourceError) as exc:
        lifecycle.fail_job(session, settings, job, task, str(exc))
        return
    # A cancel while this prepared must stand: the row is locked until this step commits.
    session.refresh(job, ["status"], with_for_update=True)
    if job.status is not JobStatus.queued:
        task.state = TaskState.cancelled if job.status is JobStatus.cancelled else TaskState.done
        return
    # The worker's own view of the machine decides: the default matrix, CPUs that exist.
    job.configs.clear()
    session.flush()  # the old rows go before new ones with the same labels arrive
    job.configs = lifecycle.config_rows(plan.configs)
    job.notes = [
        *plan.notes,
        *([nodelock.PACKING_NOTE] if settings.pack_disjoint_cores else []),
        *([split_note] if split_note else []),
    ]
    job.executor = executor.name
    job.probes, job.stall_after_s = plan.probes, plan.stall_after_s
    lifecycle.mark_running(job)
    forecast.update(job, settings.thresholds, forecast.history(session, job))  # from history, if any
    task.state = TaskState.done
    if source.from_repository_config:  # a push to a history branch: docs/guides/github.md
        schedule.record(session, settings, job, source, every_h)
    session.flush()
    if split:
        shards.record(session, settings, job, split)
    else:
        ledger.add_task(session, job, settings, SCREEN)
    ledger.notify_step(session, job, settings)


def screen_step(session: Session, settings: Settings, task: JobTask) -> None:
    """All configurations of the job, interleaved, on this node, under its measurement lock."""
    job, source = task.job, stored_source(session, task.job)
    if job.status is not JobStatus.running:
        task.state = TaskState.cancelled
        return
    checkpoint = forecast.checkpointing(
        session, settings.thresholds, job, stop_if_cancelled(session, job, task), progress_of(job)
    )
    # One shard of the job's tests (services/jobs/shards.py), or the whole suite.
    shard = shards.shard_of(session, task)
    try:
        lock = lambda: screen_lock(settings, job, progress_of(job), shard)  # noqa: E731
        with (
            checkout(settings, job, source, f"screen-{task.id}", lock, checkpoint) as (executor, directory),
            base_side(settings, job, source, f"base-{task.id}", checkpoint) as base,
            shards.only(session, shard.index) if shard else nullcontext(),
        ):
            # A sharded job's shards may run on different nodes: it has no one node class.
            if shard is None:
                NodeClass.of_executor(executor).record(job)
                # Committed now: an update of the job's row left open would hold it locked
                # through the first run, and a cancel from the API would wait for that run
                # (tests/chaos/test_runs.py, the cancel of a running job).
                checkpoint()
            screen_phase(
                session,
                settings,
                shards.shard_job(job, shard, directory) if shard else job,
                executor,
                workdir=directory,
                progress=progress_of(job),
                checkpoint=checkpoint,
                # A pull request's base, narrowed to the shard's tests it has.
                base=shards.base_side(base, job, shard) if shard and base else base,
            )
    except JobCancelled:
        task.state = TaskState.cancelled
        return
    task.state = TaskState.done
    session.flush()
    if job.first_predicted_s is not None:  # the check run in progress says the screen's forecast
        ledger.renotify_step(session, job, settings, "forecast")
    # A sharded job goes on once its last shard is done; a screen task of an older version
    # (one per configuration) may have made the finish step already.
    if (shard is None or shards.screens_done(session, job)) and session.scalar(
        select(JobTask.id).where(JobTask.job_id == job.id, JobTask.name == FINISH)
    ) is None:
        if shard is not None:
            shards.fold(session, job)
        ledger.add_task(session, job, settings, FINISH)


def finish_step(session: Session, settings: Settings, task: JobTask) -> None:
    """Drill (evidence runs in the slowest and fastest configuration), then diagnose."""
    job, source = task.job, stored_source(session, task.job)
    if job.status is not JobStatus.running:
        task.state = TaskState.cancelled
        return
    checkpoint = forecast.checkpointing(
        session, settings.thresholds, job, stop_if_cancelled(session, job, task), progress_of(job)
    )
    whole_node = lambda: drill_lock(settings, job, progress_of(job))  # noqa: E731
    try:
        with checkout(settings, job, source, f"finish-{task.id}", whole_node, checkpoint) as (executor, directory):
            drill_phase(
                session, settings, job, executor, workdir=directory, progress=progress_of(job), checkpoint=checkpoint
            )
            # A regressed test's cause: its profile on the head against the base commit's.
            profile_phase(
                session,
                settings,
                job,
                source,
                executor,
                workdir=directory,
                progress=progress_of(job),
                checkpoint=checkpoint,
            )
    except JobCancelled:
        task.state = TaskState.cancelled
        return
    diagnose_phase(session, settings, job)
    task.state = TaskState.done


# The notify step's handler is GitHub's (services/github/notify.py); services/steps.py
# puts the whole table together.
HANDLERS: dict[str, Handler] = {
    PREPARE: prepare_step,
    SCREEN: screen_step,
    FINISH: finish_step,
}
