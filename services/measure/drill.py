"""The drill: evidence runs after the screen, each probe in its own run, in the two
configurations a target's symptom compares (its slow and its fast one, chosen by
services/diagnose/pairs.py), for each flagged test (pytest) and for the whole command
where it is itself the symptom. The cause rules then compare the two.

Evidence runs are stored as Run rows of kind ``evidence`` (never mixed into the timing
statistics) and their wall time is put beside the timing median in every evidence entry
they produce, so a rule can tell when a tracer changed what it observed.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from sqlalchemy.orm import Session

from services.errors import BadInput
from services.evidence import (
    CensusContent,
    EvidenceKind,
    EvidenceRunTiming,
    EvidenceStatus,
    GilSamples,
    PySpyRecordContent,
    StallAttempt,
    StallContent,
)
from services.measure import budget, pytest_command
from services.measure.artifacts import ArtifactStore
from services.measure.configs import cpu_config
from services.measure.evidence_store import repository_paths, store_evidence
from services.measure.executors.base import Executor
from services.measure.probes import PROBES, ProbeContext, amplify
from services.measure.probes.base import FAILED, NO_STALL, unavailable
from services.measure.runs import Wrapping, run_once
from services.measure.samples import ran_through, succeeded
from services.measure.stats import Summary
from services.measure.survey_census import survey_census
from services.models import COMMAND_KINDS, Job, JobConfig, RunKind
from services.thresholds import Thresholds

Progress = Callable[[str], None]
NO_TARGETS = "no evidence runs: the timing screen found nothing and no run stalled (pass --evidence to drill anyway)"
NO_TARGETS_ALL_FAILED = (
    "no evidence runs: no timing run of the command succeeded, so there was no latency to explain "
    "(command_failed says why; pass --evidence to trace the failing command anyway)"
)
NO_TARGETS_PULL_REQUEST = (
    "no evidence runs: the screen flagged nothing within the head commit and no run stalled; "
    "a change against the base commit is judged by comparing the two (the comparison below), "
    "which no tracer runs for (pass --evidence to drill anyway)"
)


def no_targets(job: Job) -> str:
    """Why the drill ran nothing, as it was: every run failed, a pull request's comparison
    (which needs no evidence runs), or a screen that found nothing."""
    timing = [run for config in job.configs for run in config.runs if run.kind in COMMAND_KINDS]
    # A pytest run that exited 1 because some test failed timed the others: measured.
    measured = ran_through if pytest_command.is_pytest(job.command or []) else succeeded
    if timing and not any(measured(run) for run in timing):
        return NO_TARGETS_ALL_FAILED
    base_kinds = (RunKind.base, RunKind.base_warmup, RunKind.base_focus)
    if any(run.kind in base_kinds for config in job.configs for run in config.runs):
        return NO_TARGETS_PULL_REQUEST
    return NO_TARGETS


def parse_evidence(text: str | None) -> list[str] | None:
    """``--evidence`` as given: None (the default), ``none``, or a list of probe names."""
    if text is None:
        return None
    names = [name.strip() for name in text.split(",") if name.strip()]
    if names == ["none"]:
        return []
    if names == ["all"]:
        return list(PROBES)
    unknown = [name for name in names if name not in PROBES]
    if unknown or not names:
        raise BadInput(
            f"--evidence {text!r}: unknown probe {', '.join(unknown) or '(none given)'} "
            f"(known: {', '.join(PROBES)}, or all, or none)"
        )
    return list(dict.fromkeys(names))


def evidence_option(probes: list[str] | None) -> str | None:
    """A stored probe list as the `--evidence` text (parse_evidence's inverse)."""
    if probes is None:
        return None
    return ",".join(probes) or "none"


@dataclass(frozen=True)
class Target:
    """What to drill, chosen by the engine from what the timing rules found."""

    test_id: str | None  # None: the whole command
    command: list[str]
    summaries: dict[str, Summary]  # timing summaries per configuration label
    # (slow, fast) configuration labels the evidence compares; None: the slowest and the
    # fastest by median (a caller that knows no symptom)
    configs: tuple[str, str] | None = None
    # False: no symptom compares the two (services/diagnose/pairs.py), and the strace
    # probes take only one of them (_one_side)
    compared: bool = True

    def pair(self) -> tuple[str, str]:
        if self.configs is not None:
            return self.configs
        fast = min(self.summaries, key=lambda label: self.summaries[label].median)
        slow = max(self.summaries, key=lambda label: self.summaries[label].median)
        return slow, fast


def drill(
    session: Session,
    job: Job,
    executor: Executor,
    thresholds: Thresholds,
    store: ArtifactStore,
    chosen: list[Target],
    *,
    probes: list[str] | None,
    stall_after_s: float | None,
    workdir: Path,
    progress: Progress = lambda message: None,
    checkpoint: Callable[[], None] = lambda: None,
) -> int:
    """Run every probe (``probes`` None: all of them) on each target, in its slow and its
    fast configuration; return how many runs that took. ``checkpoint`` after each."""
    names = list(PROBES) if probes is None else probes
    if not names or not chosen:
        return 0
    store.purge_expired()
    by_label = {config.label: config for config in job.configs}
    scratch = Path(tempfile.mkdtemp(prefix=f"lagtrace-job{job.id}-evidence-"))
    count = 0
    # Probes the budget left out, per target and configuration (the most severe targets
    # come first, so what is left out is the least severe).
    left_out: dict[str, list[str]] = {}
    # Probes whose run would add nothing a rule reads, given what the job already holds:
    # why -> where (by default only: probes named by the user all run).
    needless: dict[str, list[str]] = {}
    try:
        for target in chosen:
            slow_label, fast_label = target.pair()
            fast_median = min(s.median for s in target.summaries.values())
            slow_median = target.summaries[slow_label].median
            stall = (
                stall_after_s
                if stall_after_s is not None
                else max(thresholds.stall_min_s, thresholds.stall_multiple * fast_median)
            )
            timeout = job.timeout_s or max(
                thresholds.evidence_timeout_min_s, thresholds.evidence_timeout_multiple * slow_median
            )
            for label in dict.fromkeys([slow_label, fast_label]):
                where = f"{target.test_id or 'the whole command'} in {label}"
                deadline, comparison = stall, False
                if label != slow_label and stall_after_s is None:
                    # The fast side is compared, not caught stalling: its snapshot is taken
                    # half-way through a typical run, while it does what is fast about it.
                    deadline = min(stall, FAST_SNAPSHOT_FRACTION * target.summaries[label].median)
                    comparison = True
                for name in names:
                    reason = None if probes is not None else _needless(job, by_label[label], target, name)
                    if reason is not None:
                        needless.setdefault(f"{name}: {reason}", []).append(where)
                        continue
                    estimate = _estimate_s(job, by_label[label], target, name)
                    if not budget.fits(job, thresholds, estimate):
                        left_out.setdefault(where, []).append(name)
                        continue
                    count += 1
                    run_dir = scratch / f"{count}-{name}"
                    run_dir.mkdir()
                    context = ProbeContext(
                        executor, run_dir, deadline, timeout, thresholds.last_snapshot_lead_s, comparison=comparison
                    )
                    _evidence_run(session, job, by_label[label], target, name, context, store, progress, workdir)
                    checkpoint()
                    shutil.rmtree(run_dir, ignore_errors=True)  # cores are large
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if needless:
        job.notes = [
            *job.notes,
            *(f"not drilled, {why} ({', '.join(wheres)})" for why, wheres in needless.items()),
        ]
        progress(f"drill: {sum(map(len, needless.values()))} evidence runs not needed ({'; '.join(needless)})")
    if left_out:
        budget.leave_out(
            job, thresholds, budget.DRILL, [f"{where}: {', '.join(probes)}" for where, probes in left_out.items()]
        )
        progress(f"budget: {sum(map(len, left_out.values()))} evidence runs left out ({', '.join(left_out)})")
    return count


@dataclass(frozen=True)
class Side:
    """One commit's checkout, profiled for a regression: ``name`` "head" (the job's own) or
    "base" (the pull request's base commit)."""

    name: str
    executor: Executor
    workdir: Path


def profile_commits(
    session: Session,
    job: Job,
    thresholds: Thresholds,
    store: ArtifactStore,
    regressed: list[tuple[str, Summary, str]],
    sides: list[Side],
    *,
    progress: Progress = lambda message: None,
    checkpoint: Callable[[], None] = lambda: None,
) -> int:
    """Each regressed test (its id, its head summary, the configuration that showed it)
    profiled with py-spy on each side, amplified as the drill profiles a test; the
    profiles are marked with their side, their frames' files made relative to their
    checkout (two checkouts, one repository: services/diagnose/hot_path.py compares them
    frame by frame). How many runs that took."""
    by_label = {config.label: config for config in job.configs}
    scratch = Path(tempfile.mkdtemp(prefix=f"lagtrace-job{job.id}-commits-"))
    count = 0
    try:
        for test_id, summary, label in regressed:
            config = by_label.get(label)
            if config is None:
                continue
            timeout = job.timeout_s or max(
                thresholds.evidence_timeout_min_s, thresholds.evidence_timeout_multiple * summary.median
            )
            for side in sides:
                ceiling = pytest_command.search_ceiling(job.executor)
                command = pytest_command.narrow_to_test(job.command, test_id, side.workdir, ceiling=ceiling)
                target = Target(test_id, command, {label: summary}, (label, label))
                if not budget.fits(job, thresholds, _estimate_s(job, config, target, "pyspy")):
                    budget.leave_out(job, thresholds, budget.DRILL, [f"{test_id} on the {side.name}: pyspy"])
                    continue
                count += 1
                run_dir = scratch / f"{count}-{side.name}"
                run_dir.mkdir()
                context = ProbeContext(side.executor, run_dir, timeout, timeout, thresholds.last_snapshot_lead_s)
                stored = config.job.evidence  # the configuration's own job (_store_evidence)
                before = {id(e) for e in stored}
                _evidence_run(session, job, config, target, "pyspy", context, store, progress, side.workdir)
                relative = functools.partial(_within, f"{side.workdir}/")
                for evidence in [e for e in stored if id(e) not in before and e.kind == EvidenceKind.pyspy]:
                    evidence.content = {**repository_paths(evidence.content, relative), "side": side.name}
                session.flush()
                checkpoint()
                shutil.rmtree(run_dir, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return count


def _within(prefix: str, text: str) -> str:
    return text.replace(prefix, "")


def _needless(job: Job, job_config: JobConfig, target: Target, name: str) -> str | None:
    """Why a test's evidence run of this probe would add nothing any rule reads, given the
    evidence the job already holds (None: it may). A suite's tests are drilled one by
    one, each probe in two configurations: a run that adds nothing costs the test's time
    again (its slow side: seconds). The whole command, drilled once, gets every probe,
    but strace on one side only where no symptom compares the two."""
    if not target.compared and name in STRACE_PROBES:
        traced = _one_side(job, target)
        if job_config.label != traced:
            # strace's counts (syscalls, read sizes) are the program's, whatever its
            # CPUs; where nothing compares the two sides, one count is the evidence. Its
            # ptrace stops cost 3-5x more across two cores than on one: a 0.29 s program
            # of recv(1) traced 27.7 s on cpuset=0-1, 5.2 s on cpuset=0
            # (docs/explanations/cost-model.md, the drill).
            return f"no symptom compares the two configurations, strace traced it in {traced} alone"
    if target.test_id is None:
        if name == "asyncio_loop" and _census_saw_no_loop(job):
            return "the census's warm-up run ran no asyncio event loop"
        return None
    if name == "imports":
        # -X importtime is read for the whole command's start-up (slow_startup) only.
        return "start-up is the whole command's, not a test's"
    if name == "reads" and _census_cleared_reads(job, target.test_id):
        # The census traced the same read syscalls during the test itself, sizes
        # included, and judged them by tiny_reads' own count and size.
        return "the survey's census traced the test's reads and found none tiny"
    drilled = [
        evidence
        for evidence in job.evidence
        if evidence.config is job_config
        and evidence.test_id == target.test_id
        and evidence.run is not None
        and evidence.run.kind is RunKind.evidence
        and evidence.parsed.ok
    ]
    if name == "faulthandler" and any(
        evidence.kind in (EvidenceKind.pyspy_dump, EvidenceKind.gdb)
        and evidence.run is not None
        and evidence.run.probe == "core"
        for evidence in drilled
    ):
        # faulthandler is the snapshot that needs no ptrace: the core probe's snapshot at
        # the same deadline already holds every thread's Python stack.
        return "the core probe's snapshot holds the Python stacks"
    if name == "asyncio_loop":
        profiles = [e.parsed for e in drilled if e.kind == EvidenceKind.pyspy]
        if any(isinstance(p, PySpyRecordContent) and p.event_loop is False for p in profiles):
            # A blocked callback of 20 ms or more is two samples or more at 100 Hz, each
            # with the loop's _run_once on its stack.
            return "py-spy sampled no asyncio event loop"
    return None


def _one_side(job: Job, target: Target) -> str:
    """Of a target's two configurations, the one its strace probes take when nothing
    compares them: without a quota (a throttled tracer stretches the run), on the fewest
    CPUs (tracer and traced take turns on one core), the slow side on a tie."""
    slow, fast = target.pair()
    by_label = {config.label: config for config in job.configs}

    def cost(label: str) -> tuple[bool, float, bool]:
        cpus = cpu_config(by_label[label])
        return cpus.cpus is not None, cpus.effective_cpus, label != slow

    return min(dict.fromkeys([slow, fast]), key=cost)


def _census_saw_no_loop(job: Job) -> bool:
    """Whether a command's census (its warm-up run with the asyncio hook:
    services/measure/survey_census.py) ran to its end with no event loop in any process."""
    return any(
        evidence.kind == EvidenceKind.asyncio_loop
        and evidence.test_id is None
        and evidence.run is not None
        and evidence.run.kind is RunKind.warmup
        and not evidence.run.timed_out
        and evidence.run.exit_code == 0
        and evidence.parsed.status is EvidenceStatus.unavailable
        for evidence in job.evidence
    )


def _census_cleared_reads(job: Job, test_id: str) -> bool:
    """Whether the survey's census (every shard's) ran to its end and did not suspect the test."""
    contents = [evidence.parsed for evidence in survey_census(job)]
    complete = [
        content
        for content in contents
        if isinstance(content, CensusContent)
        and content.ok
        and not content.timed_out
        and not content.stopped_before_timeout
    ]
    if not complete or len(complete) != len(contents):
        return False
    return not any(test_id in (content.suspects or []) for content in complete)


# The probes that run the command under strace (probes/strace.py, probes/reads.py).
STRACE_PROBES = ("strace", "reads")

# An evidence run's start-up beside its test, until one of the target's runs says better.
START_UP_GUESS_S = 1.0


def _estimate_s(job: Job, job_config: JobConfig, target: Target, probe: str) -> float:
    """An evidence run's predicted wall time: the longest of the target's evidence runs in
    this configuration so far, else its timing median (times its repetitions, plus a
    start-up for a test)."""
    earlier = [run.wall_s for run in job_config.runs if run.kind is RunKind.evidence and run.test_id == target.test_id]
    if earlier:
        return max(earlier)
    summary = target.summaries.get(job_config.label)
    median = summary.median if summary else max(s.median for s in target.summaries.values())
    if target.test_id is None:
        return median
    return START_UP_GUESS_S + _amplification(target, job_config.label, probe)[0] * median


# Where in a fast-side run its snapshot is taken (a fraction of its timing median).
FAST_SNAPSHOT_FRACTION = 0.5
# An evidence run that ended before its stall deadline is tried again (the screen said
# this configuration is slow): the noise of one run must not cost the snapshot.
MAX_STALL_ATTEMPTS = 3
# A retry's deadline: this fraction of the lower end of the configuration's timing
# distribution, so it comes well inside even a quick slow run ...
RETRY_FRACTION = 0.5
# ... but never before this multiple of the fastest configuration's median: a snapshot
# earlier than that would show a run that is not slow at all.
RETRY_FLOOR_MULTIPLE = 2.0


def retry_threshold(summaries: dict[str, Summary], label: str, threshold: float, observed: list[float]) -> float | None:
    """The next attempt's stall deadline, or None when no retry is due: the run was not
    expected to pass the deadline (this configuration's timing median is below it)."""
    summary = summaries.get(label)
    if summary is None or summary.median < threshold:
        return None
    low = min([summary.ci_low, *observed])
    floor = RETRY_FLOOR_MULTIPLE * min(s.median for s in summaries.values())
    return round(max(floor, min(threshold, RETRY_FRACTION * low)), 4)


def _evidence_run(
    session: Session,
    job: Job,
    job_config: JobConfig,
    target: Target,
    name: str,
    context: ProbeContext,
    store: ArtifactStore,
    progress: Progress,
    workdir: Path,
) -> None:
    """One evidence run, tried again with a shorter stall deadline where it ended first;
    each retry's directory goes once read, as the caller's does (a step holds one run's
    directory at a time: services/measure/executors/scratch.py)."""
    first_dir = context.run_dir
    try:
        _attempts(session, job, job_config, target, name, context, store, progress, workdir)
    finally:
        for retry in first_dir.parent.glob(f"{first_dir.name}-attempt*"):
            shutil.rmtree(retry, ignore_errors=True)


def _attempts(
    session: Session,
    job: Job,
    job_config: JobConfig,
    target: Target,
    name: str,
    context: ProbeContext,
    store: ArtifactStore,
    progress: Progress,
    workdir: Path,
) -> None:
    first_dir = context.run_dir
    where = f"{job_config.label}" + (f" [{target.test_id}]" if target.test_id else "")
    # Under pytest the stall clock counts from the start of a test (the drilled one, or
    # any one of a whole-command run), not from pytest's own start-up.
    context = replace(context, per_test=pytest_command.is_pytest(target.command))
    earlier: list[StallAttempt] = []
    looked: list[tuple[float, int, GilSamples]] = []  # each attempt's looks at the threads
    while True:
        probe = PROBES[name](context)
        missing = probe.unavailable()
        if missing is not None:
            store_evidence(session, job, job_config, target.test_id, None, missing, store, context.executor)
            progress(f"evidence {name} in {where}: {missing.content.reason}")
            return
        command, env = target.command, probe.env()
        times, target_s = _amplification(target, job_config.label, name)
        if times > 1:
            hook = context.executor.visible_path(context.run_dir, amplify.HOOK_DIR)
            command, env = amplify.amplified(command, env, context.run_dir, hook, times, target_s)
        try:
            measured = run_once(
                session,
                context.executor,
                job_config,
                command=command,
                workdir=workdir,
                run_dir=context.run_dir,
                timeout_s=context.timeout_s,
                kind=RunKind.evidence,
                repetition=1 + sum(1 for r in job_config.runs if r.kind == RunKind.evidence),
                probe=name,
                test_id=target.test_id,
                wrapping=Wrapping(probe.command, env, probe.watcher(), probe.stall_clock(), ptrace=probe.ptrace),
            )
        except BadInput as exc:
            # The screen ran this command, so what failed to start is the probe's tool (a
            # tool_path that does not exist, or is not executable): the job goes on.
            failed = unavailable(probe.kind, f"the {name} evidence run could not start: {exc}", FAILED)
            store_evidence(session, job, job_config, target.test_id, None, failed, store, context.executor)
            progress(f"evidence {name} in {where}: {failed.content.reason}")
            return
        run, result, cases = measured.run, measured.result, measured.cases
        observed = result.wall_s
        if target.test_id is not None:
            mine = [case for case in cases if case.test_id == target.test_id]
            observed = mine[0].duration_s if mine else result.wall_s
            if times > 1:  # the plugin stops early once the probe has slowed the runs
                times = amplify.ran(mine[0].iterations if mine else None, times)
        drafts = probe.collect(result)
        nothing = pytest_command.nothing_ran(result.exit_code, target.test_id) if target.test_id else None
        if nothing is not None:  # whatever the tool saw, it was not the test: never "ok"
            for draft in drafts:
                draft.content.status, draft.content.reason = FAILED, nothing
            stall = None
            break
        stall = next((d for d in drafts if d.kind == "stall"), None)
        if stall is not None and isinstance(stall.content, StallContent) and stall.content.gil_samples is not None:
            looked.append((observed, len(earlier) + 1, stall.content.gil_samples))
        if stall is None or stall.status != NO_STALL or len(earlier) + 1 >= MAX_STALL_ATTEMPTS:
            break
        if context.comparison:
            break  # a fast run that ended before its snapshot is what fast looks like
        threshold = retry_threshold(
            target.summaries, job_config.label, context.stall_after_s, [observed, *(e.observed_s for e in earlier)]
        )
        if threshold is None:
            break
        # The attempt stays stored as an evidence run (it ran); its evidence is the next one's.
        earlier.append(StallAttempt(stall_after_s=context.stall_after_s, observed_s=round(observed, 4)))
        progress(
            f"evidence {name} in {where}: ended after {observed:.3f} s, before the stall threshold of "
            f"{context.stall_after_s:.3f} s; again with {threshold:.3f} s"
        )
        retry_dir = first_dir.parent / f"{first_dir.name}-attempt{len(earlier) + 1}"
        retry_dir.mkdir()
        # Read: its evidence is the next attempt's (the caller's own directory included).
        shutil.rmtree(context.run_dir, ignore_errors=True)
        context = replace(context, run_dir=retry_dir, stall_after_s=threshold)
    if stall is not None and isinstance(stall.content, StallContent):
        stall.content.attempts = len(earlier) + 1
        stall.content.earlier_attempts = earlier
        if stall.status == NO_STALL and len(looked) > 1:
            # No attempt reached the deadline: the looks of the one that ran slowest are
            # the closest to the symptom (the last one may have been the quickest).
            _, attempt, samples = max(looked, key=lambda entry: entry[0])
            stall.content.gil_samples = samples.model_copy(update={"attempt": attempt})
    timing_median = target.summaries[job_config.label].median if job_config.label in target.summaries else None
    observer = EvidenceRunTiming(
        run_id=run.id,
        wall_s=result.wall_s,
        observed_s=observed,
        timing_median_s=timing_median,
        ratio=round(observed / timing_median, 3) if timing_median else None,
        exit_code=result.exit_code,
        timed_out=result.timed_out,
        iterations=times,
    )
    for draft in drafts:
        draft.content.probe = draft.content.probe or name
        draft.content.run = observer
        store_evidence(session, job, job_config, target.test_id, run, draft, store, context.executor)
    summary = ", ".join(f"{d.kind} {d.status}" for d in drafts)
    progress(
        f"evidence {name} in {where}: {result.wall_s:.3f} s"
        + (f" (timing median {timing_median:.3f} s)" if timing_median else "")
        + (f" after {len(earlier) + 1} attempts" if earlier else "")
        + f"; {summary}"
    )


# The probes whose evidence a short test's repetitions sharpen: samples, snapshots, syscall
# counts. Not every read traced one by one (90 us a read: a repeated test can cost
# minutes), nor import times (start-up is the same once).
AMPLIFIED = ("strace", "pyspy", "core", "faulthandler", "asyncio_loop")


def _amplification(target: Target, label: str, probe: str) -> tuple[int, float]:
    """How many times a drilled test runs in this probe's evidence run at most (1: as it
    is), and the seconds of runs under the probe after which it stops repeating."""
    summary = target.summaries.get(label)
    if target.test_id is None or probe not in AMPLIFIED or summary is None:
        return 1, amplify.TARGET_S
    if not pytest_command.is_pytest(target.command):
        return 1, amplify.TARGET_S
    # The upper end of its interval, not the median: a test slow in some runs (two modes,
    # 0.04 s and 0.4 s) repeated to fill TARGET_S at its fast median took 25 x its mean,
    # 6 s per probe instead of about one.
    slow = max(summary.median, summary.ci_high)
    if probe == "pyspy":
        planned = amplify.iterations(slow, amplify.PROFILE_TARGET_S, amplify.PROFILE_MAX_ITERATIONS)
        return planned, amplify.PROFILE_TARGET_S
    return amplify.iterations(slow), amplify.TARGET_S
