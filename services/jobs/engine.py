"""The job engine: one state machine for every way a job runs.

    prepare -> screen -> drill -> diagnose -> notify

``lagtrace run`` drives it in one process (``execute_job``, after ``plan_job``); the
service drives the same phases as ledger steps (``run_step``), run by a Celery worker or
by `lagtrace serve`'s own thread: prepare (fetch the code, read .lagtrace.yml, plan),
screen (every configuration, interleaved, on one node), finish (drill, then diagnose),
notify (the GitHub check run). Either way the screen holds the node's measurement lock
from its first run to its last, so its configurations are compared on one machine under
one load, and the drill is handed its targets here, from what the timing rules found.

Each service step claims its ledger entry first and commits the claim before the long
work; the steps it records are sent by the outbox once its last commit succeeds.
"""

from __future__ import annotations

import datetime as dt
import logging
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from services.db import unreachable
from services.diagnose import change_points, diagnose, pairs
from services.diagnose.context import RuleContext
from services.diagnose.findings import SEVERITY_ORDER, Severity
from services.diagnose.symptoms import screen_findings
from services.errors import BadInput, EngineUnavailable
from services.github.client import GitHubClient, GitHubError, check_run_body
from services.jobs import ledger, lifecycle, pull_requests, shards, sources, summaries
from services.jobs.dispatch import FINISH, NOTIFY, PREPARE, SCREEN, Step
from services.jobs.report import build_report
from services.jobs.spec import RepositoryConfig, enforce_policy
from services.measure import budget, nodelock, pytest_command
from services.measure.artifacts import make_artifact_store
from services.measure.configs import CpuConfig, cpu_config, cpus_touched, default_matrix, parse_specs
from services.measure.drill import NO_TARGETS, SurveyCensus, Target, drill, parse_evidence, survey_census
from services.measure.executors import Executor, make_executor
from services.measure.executors.docker import remove_own_containers, stop_job_containers, wait_for_engine
from services.measure.samples import surveyed
from services.measure.screen import BaseSide, screen
from services.measure.shards import on_worker_cpus
from services.measure.stats import Summary, median_interval
from services.models import (
    COMMAND_KINDS,
    Job,
    JobShard,
    JobSource,
    JobStatus,
    JobTask,
    Run,
    RunKind,
    TaskState,
    utcnow,
)
from services.settings import Settings

log = logging.getLogger("lagtrace.engine")

Progress = Callable[[str], None]
Checkpoint = Callable[[], None]


def _quiet(message: str) -> None:
    pass


def _nothing() -> None:
    pass


# --- prepare: everything the user gave is checked before anything is stored ----------


@dataclass
class JobPlan:
    command: list[str]
    workdir: Path
    configs: list[CpuConfig]
    repeat: int
    timeout_s: float | None
    notes: list[str] = field(default_factory=list)
    probes: list[str] | None = None  # probe names; None: the default (all, where the screen found something)
    stall_after_s: float | None = None
    budget_s: float | None = None  # None: the default (services/measure/budget.py)


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
    progress: Progress = _quiet,
    machine: str = "this machine",
    budget_s: float | None = None,
) -> JobPlan:
    """Check everything the user gave before anything is stored; BadInput says what is wrong."""
    if repeat < 1:
        raise BadInput(f"--repeat must be at least 1, not {repeat}")
    if timeout_s is not None and timeout_s <= 0:
        raise BadInput(f"--timeout must be a positive number of seconds, not {timeout_s:g}")
    if budget_s is not None and not budget_s > 0:
        raise BadInput(f"--budget must be a positive number of seconds, not {budget_s:g}")
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
    if executor.name == "docker":
        # The runs live in the engine's cgroup: its CPU set is what counts, not the machine's.
        machine = f"{machine}'s Docker engine"
    notes = []
    if specs:
        configs = parse_specs(specs, available, machine)
        for config in configs:
            if config.cpus is not None and quota_problem:
                raise BadInput(f"{config.label}: CPU quotas cannot be enforced on {machine}: {quota_problem}")
    else:
        configs = default_matrix(available, quota_supported=quota_problem is None)
        if quota_problem:
            notes.append(f"the default cpus=0.5 configuration was left out: {quota_problem}")
    return JobPlan(command, workdir, configs, repeat, timeout_s, notes, probes, stall_after_s, budget_s)


# --- screen, drill, diagnose: the phases both drivers run --------------------------------


@contextmanager
def node_slot(
    settings: Settings, held_by: Job | JobShard, phase: str, cpuset: tuple[int, ...] | None, progress: Progress = _quiet
) -> Iterator[None]:
    """The node's measurement lock for ``phase``, recorded on the job (or on the shard whose
    screen holds it, folded into the job's by shards.fold): the report names the node and
    the lock each phase held (a drill may run on another node than its screen)."""
    with nodelock.measurement_slot(settings, cpuset, progress) as held:
        others = [entry for entry in held_by.measured_on or [] if entry.get("phase") != phase]
        held_by.measured_on = [*others, {"phase": phase, **held.as_dict()}]
        yield


def screen_lock(
    settings: Settings, job: Job, progress: Progress = _quiet, shard: JobShard | None = None
) -> AbstractContextManager[None]:
    """The node's measurement lock for a whole screen (with packing: the CPUs its configurations use)."""
    return node_slot(settings, shard or job, "screen", cpus_touched([cpu_config(c) for c in job.configs]), progress)


def drill_lock(settings: Settings, job: Job, progress: Progress = _quiet) -> AbstractContextManager[None]:
    """Evidence runs use the slowest and the fastest configuration: the whole node."""
    return node_slot(settings, job, "drill", None, progress)


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
    screen(
        session,
        job,
        executor,
        settings.thresholds,
        workdir=workdir,
        progress=progress,
        checkpoint=checkpoint,
        base=base,
        census=SurveyCensus(session, job, executor, settings.thresholds, make_artifact_store(settings), progress),
    )
    budget.record(job, settings.thresholds)


def drill_targets(
    job: Job, settings: Settings, workdir: Path, left_out: list[str] | None = None, suspects: Sequence[str] = ()
) -> list[Target]:
    """What the drill traces, each in the two configurations its symptom compares
    (services/diagnose/pairs.py): each test (pytest) that a timing rule flags; the whole
    command where it is itself the symptom: a plain program the timing rules flag, a
    hang, a stall past --stall-after, probes asked for by name, a pytest start-up problem,
    or a suite with no flagged test where only a tracer can tell (needs_tracer); and the
    tests a surveyed suite's census ``suspects`` of polling or tiny reads. Drilling a whole
    suite for what one test does costs the suite's time once per probe."""
    context = RuleContext(job, settings.thresholds)
    samples = context.samples
    wall = samples.wall_summaries()
    hung = not wall and bool(_walls_of(job, lambda run: run.timed_out))
    if hung:
        # Every run hit the timeout: no statistic, but where it hangs is what the drill's
        # last snapshot before the kill shows.
        wall = _walls_of(job, lambda run: run.timed_out)
    elif not wall and job.probes:
        # Every run failed, and evidence was asked for by name: trace the failing command.
        wall = _walls_of(job, lambda run: run.exit_code != 0)
    if not wall:
        return []
    flagged = screen_findings(context)
    seed = job.screen_seed or 0
    is_pytest = pytest_command.is_pytest(job.command)
    flagged_tests = list(dict.fromkeys(d.test_id for d in flagged if d.test_id is not None)) if is_pytest else []
    # The most severe first (a stable sort keeps the suite's order among equals); past
    # drill_max_tests the rest are named, not traced.
    worst = {t: min(SEVERITY_ORDER[d.severity] for d in flagged if d.test_id == t) for t in flagged_tests}
    flagged_tests.sort(key=worst.__getitem__)
    # Then the tests the census suspects (polling, tiny reads): no timing mark, a tracer's.
    flagged_tests += [test for test in suspects if test not in worst]
    if left_out is not None:
        left_out += flagged_tests[settings.thresholds.drill_max_tests :]
    flagged_tests = flagged_tests[: settings.thresholds.drill_max_tests]
    slowest = max(summary.median for summary in wall.values())
    command_findings = [draft for draft in flagged if draft.test_id is None]
    surveyed = any(run.kind is RunKind.survey for config in job.configs for run in config.runs)
    if flagged_tests or surveyed:
        # The tests carry the symptom; the command's own part is its start-up. A suite of
        # real size is never traced whole for what a tracer alone might see: each probe
        # would cost the whole suite's time again (docs/explanations/cost-model.md).
        command_flagged = any(
            draft.kind in COMMAND_SYMPTOMS and SEVERITY_ORDER[draft.severity] <= SEVERITY_ORDER[Severity.medium]
            for draft in command_findings
        )
    else:
        command_flagged = bool(command_findings) or needs_tracer(context, wall)
    stalled = job.stall_after_s is not None and slowest >= job.stall_after_s
    found: list[Target] = []
    if job.probes is not None or hung or stalled or command_flagged:
        pair = pairs.choose(samples, settings.thresholds, None, wall, flagged, seed)
        found.append(Target(None, list(job.command), wall, (pair.slow, pair.fast) if pair else None))
    for test_id in flagged_tests:
        narrowed = pytest_command.narrow_to_test(
            job.command, test_id, workdir, ceiling=pytest_command.search_ceiling(job.executor)
        )
        summaries = samples.test_summaries(test_id) if test_id in samples.tests else _survey_summaries(job, test_id)
        if not summaries:
            continue
        pair = pairs.choose(samples, settings.thresholds, test_id, summaries, flagged, seed)
        found.append(Target(test_id, narrowed, summaries, (pair.slow, pair.fast) if pair else None))
    return found


def _survey_summaries(job: Job, test_id: str) -> dict[str, Summary]:
    """A test the survey cleared: its one duration per configuration."""
    return {label: median_interval(values) for label, values in surveyed(job).get(test_id, {}).items()}


def census_suspects(job: Job) -> list[str]:
    """What the survey's census sends to the drill (polling, tiny reads), shard by shard."""
    found: list[str] = []
    for evidence in sorted(survey_census(job), key=lambda e: (e.run.shard or 0) if e.run else 0):
        found += [test for test in evidence.content.get("suspects") or [] if test not in found]
    return found


# What the whole command of a suite with flagged tests is drilled for (medium or high):
# its own start-up.
COMMAND_SYMPTOMS = ("slow_startup",)


def needs_tracer(context: RuleContext, wall: dict[str, Summary]) -> bool:
    """Whether the whole command is drilled although no timing rule flagged it: slow in
    even its fastest configuration, or living in the kernel. Socket reads, a hot Python
    path and a blocked event loop leave no mark on the timing screen's numbers."""
    limits = context.thresholds
    if wall and min(summary.median for summary in wall.values()) >= limits.drill_slow_command_s:
        return True
    # 300,000 recv(1) take 0.2 s here, half of it system time, where a healthy Python
    # program spends a few per cent there.
    for config in context.job.configs:
        runs = [run for run in context.timing_runs(config) if run.wall_s > 0 and run.exit_code == 0]
        if not runs:
            continue
        sys_s = statistics.median(run.sys_s for run in runs)
        share = statistics.median(run.sys_s / run.wall_s for run in runs)
        if sys_s >= limits.drill_syscall_heavy_min_s and share >= limits.drill_syscall_heavy_share:
            return True
    return False


def _walls_of(job: Job, unsuccessful: Callable[[Run], bool]) -> dict[str, Summary]:
    """Per configuration, the median interval of the timing runs that ``unsuccessful`` picks."""
    walls = {
        config.label: [run.wall_s for run in config.runs if run.kind in COMMAND_KINDS and unsuccessful(run)]
        for config in job.configs
    }
    return {label: median_interval(values) for label, values in walls.items() if values}


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
        job.notes = [*job.notes, NO_TARGETS]
    return count


def diagnose_phase(session: Session, settings: Settings, job: Job) -> None:
    """The rules over everything stored (and a pull request's comparison with its base); the job is done."""
    diagnose(session, job, settings.thresholds)
    pull_requests.record(session, job, settings.thresholds)
    lifecycle.finish(session, settings, job)
    # The branch's history now ends with this job: a step it completes is reported on
    # the push that made it, whose check run is brought up to date.
    earlier: dict[int, Job] = {}
    for finding in change_points.after_job(session, job, settings.thresholds, settings.change_point_branches):
        if finding.job_id != job.id:
            ledger.renotify_step(session, finding.job, settings, f"slower_since:{finding.fingerprint[:16]}")
            earlier[finding.job_id] = finding.job
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
    checkpoint()
    try:
        with screen_lock(settings, job, progress):
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


class JobCancelled(Exception):
    """Raised at a checkpoint once the job was cancelled: the step stops there."""


class LeaseLost(Exception):
    """Raised at a checkpoint once the step was re-leased to another worker (this one was
    presumed dead: its heartbeats did not reach the database): this one stops, recording nothing."""


_HOLDER = "lagtrace.holder"


class StepHeartbeat:
    """Renews the lease of the step this process runs, from a thread of its own.

    The beat stops with the process (kill -9, the OOM killer, SIGTERM's default action), so
    an expired lease means a dead worker whatever killed it. Each beat also looks at the
    job: once it is cancelled, its containers are stopped at once, so cancel frees the
    node within one heartbeat rather than after the current run.
    """

    def __init__(self, session_factory: sessionmaker[Session], settings: Settings, task: JobTask, executor: str):
        self.session_factory, self.settings = session_factory, settings
        self.task_id, self.job_id, self.worker, self.attempt = task.id, task.job_id, task.worker or "", task.attempts
        self.executor = executor
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"lagtrace-heartbeat-{task.id}", daemon=True)

    def __enter__(self) -> StepHeartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join(timeout=self.settings.heartbeat_interval_s + 15)

    def beat(self) -> None:
        with self.session_factory() as session:
            ours = ledger.renew(session, self.settings, self.task_id, self.worker, self.attempt)
            status = session.scalar(select(Job.status).where(Job.id == self.job_id))
            session.commit()
        if not ours and not self.lost:
            self.lost = True
            log.warning("job %s: task %s is no longer held by %s", self.job_id, self.task_id, self.worker)
        # "auto" may have become docker: asking the engine costs one request per cancelled job.
        # Every beat while cancelled: a container started after the last kill is killed too.
        if status is JobStatus.cancelled and self.executor != "local":
            stopped = stop_job_containers(self.settings, self.job_id)
            if stopped:
                log.info("job %s cancelled: stopped %d running container(s)", self.job_id, len(stopped))

    def _loop(self) -> None:
        while not self._stop.wait(self.settings.heartbeat_interval_s):
            try:
                self.beat()
            except Exception as exc:
                # The database (or the engine) is away: the next beat tries again; the lease
                # outlives one missed beat (Settings: interval at most half the lease).
                log.warning("job %s: heartbeat missed: %s: %s", self.job_id, type(exc).__name__, exc)


def _hold(session: Session, task: JobTask) -> None:
    """Fence: lock the step's row and make sure this worker still holds it before committing."""
    holder = session.info.get(_HOLDER)
    if holder is None:
        return  # a handler called outside run_step (tests): nobody else can hold it
    worker, attempt = holder
    # Only a claim changes the holder and the attempt; the state may be this step's own
    # uncommitted change (done), or pending again after the reconciler resent it, in which
    # case finishing it here leaves the resent message nothing to claim.
    with session.no_autoflush:
        held = session.execute(
            select(JobTask.worker, JobTask.attempts).where(JobTask.id == task.id).with_for_update()
        ).one()
    if held.worker != worker or held.attempts != attempt:
        raise LeaseLost


def run_step(session_factory: sessionmaker[Session], settings: Settings, step: Step) -> None:
    """One step in its own session: claim, work, commit (the outbox then sends what comes next).

    While the step runs, a heartbeat renews its lease. The database going away pauses the
    step: it waits for the database and gives the step back to the ledger, not counted as an
    attempt. The Docker engine going away pauses it too (``_wait_out_engine``). A failure is
    recorded on the job, and recording it is retried until it is.
    """
    handler = HANDLERS[step.kind]
    worker, attempt = ledger.worker_name(settings), None
    try:
        with session_factory() as session:
            task = ledger.claim(session, settings, step)
            if task is None:
                return
            attempt = task.attempts
            executor = task.job.executor
            session.commit()
            session.info[_HOLDER] = (worker, attempt)
            with StepHeartbeat(session_factory, settings, task, executor):
                try:
                    handler(session, settings, task)
                    _hold(session, task)
                    session.commit()
                except LeaseLost:
                    session.rollback()
                    log.warning(
                        "%s of job %s was re-leased to another worker; this one stops", step.task_name, step.job_id
                    )
                except EngineUnavailable as exc:
                    # Still under the heartbeat: the lease holds while the engine is waited for.
                    _rollback(session)
                    _wait_out_engine(session_factory, settings, step, worker, attempt, exc)
                except Exception as exc:
                    if unreachable(exc):
                        raise
                    _rollback(session)
                    error = f"{task.name}: {type(exc).__name__}: {exc}"
                    _until_recorded(
                        session_factory,
                        settings,
                        f"recording the failure of {step.task_name}",
                        _failer(settings, step, error),
                    )
                    raise
    except Exception as exc:
        if not unreachable(exc):
            raise
        log.warning(
            "%s of job %s paused: the database is unreachable (%s); it is given back once the database answers",
            step.task_name,
            step.job_id,
            exc,
        )
        _until_recorded(
            session_factory,
            settings,
            f"giving back {step.task_name}",
            lambda s: ledger.release(s, settings, step, worker, attempt),
        )


def _wait_out_engine(
    session_factory: sessionmaker[Session],
    settings: Settings,
    step: Step,
    worker: str,
    attempt: int | None,
    exc: EngineUnavailable,
) -> None:
    """The Docker engine went away under the step (refused, reset, timed out, restarted) or
    failed it with a 5xx: the environment, never the command, so nothing of this attempt is
    stored. The engine is waited for with backoff (at most LAGTRACE_DOCKER_ENGINE_WAIT_S);
    what the attempt left is removed, and the step is given back to the ledger: at once and
    not counted as an attempt when the engine answers again (as for the database), else
    counted and after the same pause again; with its attempts used up the job fails saying
    the engine was unavailable."""
    log.warning(
        "%s of job %s paused: the Docker engine is unavailable (%s); waiting up to %g s for it",
        step.task_name,
        step.job_id,
        exc,
        settings.docker_engine_wait_s,
    )
    back = wait_for_engine(settings.docker_engine_wait_s, lambda line: log.info("job %s: %s", step.job_id, line))
    if back:
        left = remove_own_containers(settings, step.job_id)
        if left:
            log.info("job %s: removed %d container(s) of the interrupted attempt", step.job_id, len(left))
    _until_recorded(
        session_factory,
        settings,
        f"giving back {step.task_name}",
        lambda s: _give_back_after_outage(s, settings, step, worker, attempt, str(exc), back and not exc.answered),
    )


def _give_back_after_outage(
    session: Session,
    settings: Settings,
    step: Step,
    worker: str,
    attempt: int | None,
    error: str,
    uncounted: bool,
) -> None:
    task = session.scalar(
        select(JobTask).where(JobTask.job_id == step.job_id, JobTask.name == step.task_name).with_for_update()
    )
    if task is None or task.state is not TaskState.running or task.worker != worker or task.attempts != attempt:
        return  # finished, cancelled, or re-leased meanwhile: not ours to give back
    if task.job.status in lifecycle.FINISHED:
        # A cancel kills the job's containers, which looks the same from here.
        task.state = TaskState.cancelled
        return
    if uncounted:
        log.info("%s of job %s: the Docker engine answers again; the step runs again", step.task_name, step.job_id)
        ledger.release(session, settings, step, worker, attempt)
        return
    reason = f"{task.name}: the Docker engine was unavailable: {error}"
    if task.attempts >= settings.task_max_attempts:
        lifecycle.fail_job(session, settings, task.job, task, f"{reason} (in {task.attempts} attempts; giving up)")
        return
    log.warning(
        "%s of job %s: given back; the reconciler sends it again in %g s",
        step.task_name,
        step.job_id,
        settings.docker_engine_wait_s,
    )
    ledger.postpone(task, reason, settings.docker_engine_wait_s)


def _rollback(session: Session) -> None:
    try:
        session.rollback()
    except Exception as exc:
        if not unreachable(exc):
            raise


def _failer(settings: Settings, step: Step, error: str) -> Callable[[Session], None]:
    def record(session: Session) -> None:
        task = session.scalar(select(JobTask).where(JobTask.job_id == step.job_id, JobTask.name == step.task_name))
        if task is not None and task.job.status is JobStatus.cancelled:
            task.state = TaskState.cancelled  # what a cancel stopped (a killed install) did not fail
        elif task is not None:
            lifecycle.fail_job(session, settings, task.job, task, error)

    return record


def _until_recorded(
    session_factory: sessionmaker[Session], settings: Settings, what: str, action: Callable[[Session], object]
) -> None:
    """Run ``action`` in a fresh session and commit, retrying while the database is unreachable."""
    while True:
        try:
            with session_factory() as session:
                action(session)
                session.commit()
                return
        except Exception as exc:
            if not unreachable(exc):
                raise
            log.warning("%s waits for the database: %s", what, exc)
            time.sleep(settings.database_retry_s)


def _progress(job: Job) -> Progress:
    return lambda line: log.info("job %s: %s", job.id, line)


def _executor(job: Job, source: JobSource, settings: Settings) -> Executor:
    # After prepare, job.executor is the one `auto` chose there, not `auto` again.
    executor = make_executor(
        job.executor,
        settings,
        image=source.image,
        progress=_progress(job),
        allowed=settings.allowed_executors,
        cache_scope=f"project-{job.project_id}",
        job_id=job.id,
    )
    return on_worker_cpus(executor, settings.worker_cpus)


def _evidence_option(probes: list[str] | None) -> str | None:
    """The stored probe list as plan_job takes it (the `--evidence` text)."""
    if probes is None:
        return None
    return ",".join(probes) or "none"


def _stop_if_cancelled(session: Session, job: Job, task: JobTask) -> Checkpoint:
    """A checkpoint: commit what was measured (if the step is still ours), then stop if the
    job was cancelled meanwhile."""

    def checkpoint() -> None:
        _hold(session, task)
        session.commit()
        session.refresh(job, ["status"])
        if job.status is JobStatus.cancelled:
            raise JobCancelled

    return checkpoint


@contextmanager
def _checkout(
    settings: Settings,
    job: Job,
    source: JobSource,
    name: str,
    lock: Callable[[], AbstractContextManager[None]],
    checkpoint: Checkpoint,
    commit: str | None = None,
) -> Iterator[tuple[Executor, Path]]:
    """A fresh checkout of the job's code (``commit``: another commit of its repository) and
    its executor, held under the node's measurement lock."""
    directory, _ = sources.checkout(source, settings, name, commit=commit)
    try:
        executor = _executor(job, source, settings)
        with lock():
            checkpoint()  # the job may have been cancelled while this waited for the node
            # Inside the lock: installing dependencies (cached per node) burns CPU that
            # would disturb a run being measured beside it.
            executor.prepare(directory, _progress(job))
            yield executor, directory
    finally:
        sources.remove(directory)


@contextmanager
def _base_side(
    settings: Settings, job: Job, source: JobSource, name: str, checkpoint: Checkpoint
) -> Iterator[BaseSide | None]:
    """A pull request's base commit, checked out and prepared beside the head (inside the
    head's measurement lock already); None for other jobs, or when the base cannot be
    fetched (the head is still screened, and the report says why there is no comparison)."""
    if not source.base_commit_sha:
        yield None
        return
    with ExitStack() as stack:
        base: BaseSide | None = None
        try:
            executor, directory = stack.enter_context(
                _checkout(settings, job, source, name, nullcontext, checkpoint, commit=source.base_commit_sha)
            )
        except (BadInput, sources.SourceError) as exc:
            job.notes = [*job.notes, f"the base commit {source.base_commit_sha[:12]} could not be prepared: {exc}"]
        else:

            def needs_runs(labels: list[str]) -> list[str]:
                return [label for label in pull_requests.needs_runs(job, settings.thresholds) if label in labels]

            base = BaseSide(directory, executor, needs_runs)
        yield base


def _source(session: Session, job: Job) -> JobSource:
    source = session.get(JobSource, job.id)
    if source is None:
        raise BadInput(f"job {job.id} has no stored source: it was run with `lagtrace run`")
    return source


def prepare_step(session: Session, settings: Settings, task: JobTask) -> None:
    job, source = task.job, _source(session, task.job)
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
                source.fail_on = spec.fail_on if isinstance(spec, RepositoryConfig) else None
                specs = spec.configs
            else:
                specs = [config.label for config in job.configs]
            job.timeout_s = lifecycle.run_timeout(settings, job.timeout_s)
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
                machine="this worker",
                budget_s=job.budget_s,
            )
            split, split_note = shards.plan(
                session,
                settings,
                job,
                executor,
                directory,
                progress=_progress(job),
            )
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
    task.state = TaskState.done
    session.flush()
    if split:
        shards.record(session, settings, job, split)
    else:
        ledger.add_task(session, job, settings, SCREEN)
    ledger.notify_step(session, job, settings)


def screen_step(session: Session, settings: Settings, task: JobTask) -> None:
    """All configurations of the job, interleaved, on this node, under its measurement lock."""
    job, source = task.job, _source(session, task.job)
    if job.status is not JobStatus.running:
        task.state = TaskState.cancelled
        return
    checkpoint = _stop_if_cancelled(session, job, task)
    # One shard of the job's tests (services/jobs/shards.py), or the whole suite.
    shard = shards.shard_of(session, task)
    try:
        lock = lambda: screen_lock(settings, job, _progress(job), shard)  # noqa: E731
        with (
            _checkout(settings, job, source, f"screen-{task.id}", lock, checkpoint) as (executor, directory),
            _base_side(settings, job, source, f"base-{task.id}", checkpoint) as base,
            shards.only(session, shard.index) if shard else nullcontext(),
        ):
            screen_phase(
                session,
                settings,
                shards.shard_job(job, shard, directory) if shard else job,
                executor,
                workdir=directory,
                progress=_progress(job),
                checkpoint=checkpoint,
                # A pull request's base, narrowed to the shard's tests it has.
                base=shards.base_side(base, job, shard) if shard and base else base,
            )
    except JobCancelled:
        task.state = TaskState.cancelled
        return
    task.state = TaskState.done
    session.flush()
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
    job, source = task.job, _source(session, task.job)
    if job.status is not JobStatus.running:
        task.state = TaskState.cancelled
        return
    checkpoint = _stop_if_cancelled(session, job, task)
    whole_node = lambda: drill_lock(settings, job, _progress(job))  # noqa: E731
    try:
        with _checkout(settings, job, source, f"finish-{task.id}", whole_node, checkpoint) as (executor, directory):
            drill_phase(
                session, settings, job, executor, workdir=directory, progress=_progress(job), checkpoint=checkpoint
            )
    except JobCancelled:
        task.state = TaskState.cancelled
        return
    diagnose_phase(session, settings, job)
    task.state = TaskState.done


def notify_github(session: Session, settings: Settings, task: JobTask) -> None:
    """Bring the GitHub check run to the job's current state (create it the first time)."""
    job = task.job
    source = session.scalar(select(JobSource).where(JobSource.job_id == job.id).with_for_update())
    if source is None or not source.github_repository:
        task.state = TaskState.done
        return
    report = (
        (summaries.stored_report(session, job) or build_report(job, settings.thresholds))
        if job.status in lifecycle.FINISHED
        else None
    )
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
        return
    task.state = TaskState.done


HANDLERS: dict[str, Callable[[Session, Settings, JobTask], None]] = {
    PREPARE: prepare_step,
    SCREEN: screen_step,
    FINISH: finish_step,
    NOTIFY: notify_github,
}
