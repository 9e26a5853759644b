"""The timing screen: repetitions of the command in every configuration, no tracer.

Repetitions are interleaved (one run of each configuration per round, in an order
shuffled every round by the job's recorded seed) so that drift on a noisy machine, and
the after-effects of one run on the next, spread over all configurations instead of
biasing one. Each configuration first gets one warm-up run, stored as such and left out
of every statistic. A configuration stops early once more runs cannot change its
verdict against any other, never before ``min_repetitions`` runs (the false-positive
rate of that rule is measured by tests/bench/bench_false_positives.py). A configuration
whose warm-up run hits the timeout hangs: that run is kept as its first timed run and it
is not run again, so a hung suite costs one run timeout per configuration, not
``repeat + 1`` of them (which outlived the step's time limit and failed the job blind).

A pytest suite of real size (``focus_min_tests`` tests or more) is surveyed first: the
warm-up round, one whole-suite run per configuration, shows which tests could hold a
finding, and only those are rerun, together, in one narrowed pytest process per run (the
focused screen, services/measure/survey.py). A test the survey clears costs one run per
configuration; the survey's runs are the whole command's record.

A pull request's job also screens its base commit (``base``): each configuration's base
and head runs are shuffled into the same rounds, on the same node, so that whatever the
machine does meanwhile falls on both sides alike.
"""

from __future__ import annotations

import itertools
import random
import secrets
import shutil
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from sqlalchemy.orm import Session

from services.measure import budget, hostload, pytest_command, warm
from services.measure.executors.base import Executor, RunResult
from services.measure.retakes import RETAKEN_KINDS, Neighbour, retake_while_disturbed
from services.measure.runs import Measured, Wrapping, run_once
from services.measure.samples import JobSamples, collect
from services.measure.stats import configuration_test, median_interval, pair_settled, rank_test
from services.measure.survey import (
    CERTAIN,
    cleared_in_rounds,
    flagged_before,
    spread_out,
    spread_since,
    survey_tests,
    suspicion,
)
from services.measure.survey_census import SurveyCensus
from services.models import Job, JobConfig, Run, RunKind
from services.thresholds import Thresholds

Progress = Callable[[str], None]


@dataclass
class BaseSide:
    """The base commit's checkout, its executor (prepared on it), and when its runs may stop:
    ``needs_runs`` answers, after each round, which configurations the comparison wants more of."""

    workdir: Path
    executor: Executor
    needs_runs: Callable[[list[str]], list[str]]
    # The command on the base (None: the job's): a shard's tests that the base commit has.
    command: list[str] | None = None


def screen(
    session: Session,
    job: Job,
    executor: Executor,
    thresholds: Thresholds,
    *,
    workdir: Path,
    progress: Progress = lambda message: None,
    checkpoint: Callable[[], None] = lambda: None,
    base: BaseSide | None = None,
    census: SurveyCensus | None = None,
) -> None:
    """Run the timing screen for all of ``job``'s configurations, storing every run as it finishes.

    ``checkpoint`` is called after each stored run: the caller commits there, so a
    killed lagtrace loses at most the run in flight (and a cancelled job stops).
    ``census`` traces the head's warm-up run of its configuration (a suite's survey).
    """
    active = list(job.configs)
    if job.screen_seed is None:
        job.screen_seed = secrets.randbits(32)
    order = random.Random(job.screen_seed)
    scratch = Path(tempfile.mkdtemp(prefix=f"lagtrace-job{job.id}-"))

    sides = [False, True] if base is not None else [False]
    repeat = job.repeat
    if base is not None and repeat < thresholds.base_min_repeat:
        # A comparison the rank test cannot decide at 5 runs a side goes on to 7 (the
        # settled ones still stop at 5): bench pr_power.
        repeat = thresholds.base_min_repeat
        note = (
            f"a pull request's comparison runs up to {repeat} times a side where {job.repeat} cannot decide it "
            "(at 5 runs a side the rank test's smallest p-value, 0.008, cannot pass the false discovery rate "
            "over more than a few comparisons)"
        )
        if note not in job.notes:  # a re-leased screen says it once
            job.notes = [*job.notes, note]
    # (label, on_base) of each side whose warm-up hit the timeout: never run again.
    hung: set[tuple[str, bool]] = set()
    # Test id -> its cold (first) runs in the focused processes, kept apart from the timed ones.
    first_runs: dict[str, list[float]] = {}
    on_base_whole = (base.command if base is not None else None) or job.command
    neighbour = Neighbour()

    def measure(
        job_config: JobConfig,
        kind: RunKind,
        repetition: int,
        on_base: bool = False,
        command: list[str] | None = None,
        base_command: list[str] | None = None,
    ) -> None:
        run_dir = scratch / f"{job_config.position}-{repetition}-{kind.value}{'-base' if on_base else ''}"
        run_dir.mkdir()
        # A run's directory goes once its files are read: a step that kept them all held
        # whatever each run wrote there until it ended (runs of 3.9 GB each fit under the
        # per-run cap and filled the disk together; tests/cli/test_run_scratch.py).
        try:
            measure_in(run_dir, job_config, kind, repetition, on_base, command, base_command)
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)

    def measure_in(
        run_dir: Path,
        job_config: JobConfig,
        kind: RunKind,
        repetition: int,
        on_base: bool,
        command: list[str] | None,
        base_command: list[str] | None,
    ) -> None:
        if on_base and base is not None:
            kind = {RunKind.warmup: RunKind.base_warmup, RunKind.focus: RunKind.base_focus}.get(kind, RunKind.base)
        traced = census.wrapping(job_config, run_dir) if census is not None and kind is RunKind.warmup else None
        # A narrowed process times each test warm (services/measure/warm.py).
        warming = (
            warm_wrapping(base.executor if on_base and base is not None else executor, run_dir)
            if kind in (RunKind.focus, RunKind.base_focus)
            else None
        )

        def run(wrapping: Wrapping | None = None) -> Measured:
            return run_once(
                session,
                base.executor if on_base and base is not None else executor,
                job_config,
                command=(base_command or on_base_whole) if on_base else (command or job.command),
                workdir=base.workdir if on_base and base is not None else workdir,
                run_dir=run_dir,
                timeout_s=job.timeout_s,
                kind=kind,
                repetition=repetition,
                probe=census.run_probe() if wrapping is not None and census is not None else None,
                wrapping=wrapping or warming,
            )

        measured = run(traced)
        if kind in RETAKEN_KINDS:
            measured = retake_while_disturbed(job, thresholds, measured, run, checkpoint, progress, neighbour)
        if kind is RunKind.focus:
            for test_id, seconds in warm.first_runs(run_dir).items():
                first_runs.setdefault(test_id, []).append(seconds)
        if census is not None and traced is not None and not census.collect(job_config, measured):
            # The tracer never ran the suite: the warm-up is taken again without it.
            progress(f"{job_config.label}: the census's tracer ran nothing; the warm-up run again, untraced")
            session.delete(measured.run)
            session.flush()
            measured = run()
        line = _progress_line(job_config, kind, repetition, repeat, measured.result, len(measured.cases))
        broken = (
            pytest_command.suite_failure(measured.result.exit_code, measured.run.output_tail, len(measured.cases))
            if kind in (RunKind.warmup, RunKind.timing) and pytest_command.is_pytest(job.command)
            else None
        )
        if broken is not None:
            # No test ran and none will: every further run, in any configuration, would
            # fail the same way. The run is what the job measured (a timed run, for the
            # command_failed rule); the screen stops here.
            measured.run.kind, measured.run.repetition = RunKind.timing, 1
            note = _stopped_note(broken, job_config.label, measured)
            if note not in job.notes:
                job.notes = [*job.notes, note]
            checkpoint()
            progress(f"{line}: {note}")
            raise _SuiteBroken(broken)
        if kind in (RunKind.warmup, RunKind.base_warmup) and measured.result.timed_out:
            # Nothing warmed up: the command hangs here, and every further run would wait
            # out the same timeout. The run is what this configuration measured: a timed
            # run, so that the rules (command_failed) and the drill (a hang) see it.
            measured.run.kind = RunKind.base if on_base else RunKind.timing
            measured.run.repetition = 1
            hung.add((job_config.label, on_base))
            timeout = job.timeout_s or round(measured.result.wall_s)
            note = (
                f"{job_config.label} hung{' on the base commit' if on_base else ''}: its first run hit the "
                f"{timeout:g} s timeout, so it was not run again"
            )
            if note not in job.notes:  # a re-leased screen says it once
                job.notes = [*job.notes, note]
            line = (
                f"{job_config.label}: first run hit the timeout ({measured.result.wall_s:.3f} s), hung: not run again"
            )
        checkpoint()
        progress(("base " if on_base else "") + line)

    def this_round() -> list[tuple[JobConfig, bool]]:
        return [(c, side) for c in active for side in sides if (c.label, side) not in hung]

    try:
        try:
            for job_config, on_base in round_order(order, this_round()):
                measure(job_config, RunKind.warmup, 0, on_base)
        except _SuiteBroken:
            return
        # A configuration that hung measured all it will: its verdict (it hangs) is settled.
        active = [c for c in active if (c.label, False) not in hung]
        # A suite of real size: the warm-up round was its survey, and only the tests it
        # could not clear are rerun, together (services/measure/survey.py).
        focus = survey(session, job, thresholds, progress, with_base=base is not None, census=census)
        if focus is not None and not focus.head:
            return
        command, base_command, kind = job.command, on_base_whole, RunKind.timing
        if focus is not None:
            ceiling = pytest_command.search_ceiling(job.executor)
            command = pytest_command.narrow_to_tests(job.command, focus.head, workdir, ceiling)
            if base is not None:
                base_command = pytest_command.narrow_to_tests(on_base_whole, focus.base, base.workdir, ceiling)
            kind = RunKind.focus
        # Beyond --repeat only for a pair that looks apart but is no discovery yet (undecided).
        limit = repeat + (thresholds.undecided_extra_runs if base is None else 0)
        repetition = 1
        while repetition <= limit:
            if not this_round():
                break
            cost = _round_cost(this_round(), kind)
            if not budget.fits(job, thresholds, cost):
                labels = sorted({c.label for c, _ in this_round()})
                last = max(repeat, repetition)
                budget.leave_out(job, thresholds, budget.ROUNDS, [f"runs {repetition}-{last} of {', '.join(labels)}"])
                left = budget.remaining_s(job, thresholds)
                progress(f"budget: run {repetition} would take about {cost:.1f} s, {left:.1f} s left: the screen stops")
                break
            try:
                for job_config, on_base in round_order(order, this_round()):
                    measure(job_config, kind, repetition, on_base, command, base_command)
            except _SuiteBroken:
                return
            if focus is not None and repetition == 1 and not focus_ran(job, base is not None):
                progress("the narrowed suite ran none of its tests: screening the whole suite instead")
                unfocus(job)
                focus, command, base_command, kind = None, job.command, on_base_whole, RunKind.timing
                continue
            if focus is not None and base is None and repetition == thresholds.focus_futility_runs:
                # A pull request's tests are compared with the base, not cleared this way.
                rest = _futility_stop(job, thresholds, focus, repetition, progress)
                if not rest:
                    break
                if rest != focus.head:
                    focus = Focus(rest, [], focus.sure)
                    command = pytest_command.narrow_to_tests(job.command, rest, workdir, ceiling)
            labels = [c.label for c in active]
            samples = collect(job)
            if focus is not None:
                samples.wall = {}  # the survey timed the whole command once; the tests carry the verdicts
            every = [c.label for c in job.configs if (c.label, False) not in hung] if base is None else None
            still = still_active(labels, samples, thresholds, repetition, repeat, every)
            if base is not None and repetition < repeat:
                still = [*still, *(label for label in base.needs_runs(labels) if label not in still)]
            for done in active:
                if done.label not in still and repetition < repeat:
                    progress(f"{done.label}: verdict settled after {repetition} runs")
            if still and repetition >= repeat:
                progress(
                    f"{' and '.join(still)}: apart on their own but not yet a discovery among the tests judged: "
                    f"run {repetition + 1} of up to {limit}"
                )
            active = [c for c in job.configs if c.label in still and (c.label, False) not in hung]
            if not active:
                break
            repetition += 1
        _note_first_calls(job, thresholds, first_runs)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class _SuiteBroken(Exception):
    """A pytest run of the whole suite ran no test, and no further run would (a collection
    error, no test collected, a usage error): the screen stops."""


def _stopped_note(failure: str, label: str, measured: Measured) -> str:
    where = f"the screen stopped after its first run ({label}): every other run would fail the same way"
    if failure == pytest_command.COLLECTION_ERROR:
        errors = measured.collection_errors
        named = "; ".join(f"{e.module} ({e.exception})" for e in errors[:3]) + (" ..." if len(errors) > 3 else "")
        return f"pytest could not collect {named}: no test ran, so {where}"
    if failure == pytest_command.NO_TESTS:
        return f"pytest collected no tests (exit 5): nothing ran, so {where}"
    return f"pytest refused the command (exit 4, a usage error: a path or option it does not know): {where}"


def warm_wrapping(executor: Executor, run_dir: Path) -> Wrapping:
    """The focused run's command with the warm-up plugin (services/measure/warm.py)."""
    hook = executor.visible_path(run_dir, warm.HOOK_DIR)
    out = executor.visible_path(run_dir, warm.OUTPUT_PREFIX)
    _, env = warm.warmed([], {}, run_dir, hook, out)
    return Wrapping(command=lambda command: [*command, "-p", warm.PLUGIN], env=env)


def _note_first_calls(job: Job, thresholds: Thresholds, first_runs: dict[str, list[float]]) -> None:
    """The focused processes' one-time cost, said once on the job (never a test's latency):
    cold runs two modes apart from the test's warm ones, as latency_flaky would judge them."""
    timed: dict[str, list[float]] = {}
    for config in job.configs:
        for run in config.runs:
            if run.kind is RunKind.focus:
                for result in run.test_results:
                    if result.outcome == "passed":
                        timed.setdefault(result.test_id, []).append(result.duration_s)
    note = warm.first_call_note(first_runs, timed, thresholds.flaky_min_spread_s, thresholds.flaky_gap_ratio)
    if note is not None and note not in job.notes:
        job.notes = [*job.notes, note]


_ON_BASE = {RunKind.focus: RunKind.base_focus, RunKind.timing: RunKind.base}


def _futility_stop(job: Job, thresholds: Thresholds, focus: Focus, rounds: int, progress: Progress) -> list[str]:
    """The focused tests that go on after ``rounds`` focused rounds: all but those each
    round cleared by the survey's own rule (survey.cleared_in_rounds), which are noted."""
    done = [
        {
            config.label: run
            for config in job.configs
            for run in config.runs
            if run.kind is RunKind.focus and run.repetition == r
        }
        for r in range(1, rounds + 1)
    ]
    surveyed = {config.label: run for config in job.configs for run in config.runs if run.kind is RunKind.survey}
    judged = [test for test in focus.head if test not in focus.sure]
    cleared = set(cleared_in_rounds(done, list(job.configs), thresholds, judged, surveyed))
    if not cleared:
        return focus.head
    rest = [test for test in focus.head if test not in cleared]
    note = (
        f"{len(cleared)} of the {len(focus.head)} tests the survey kept were cleared after {rounds} focused runs per "
        f"configuration (none apart by {thresholds.survey_ratio:g}x in any run, none spread like two modes); "
        f"{len(rest)} went on"
    )
    if note not in job.notes:
        job.notes = [*job.notes, note]
    progress(f"focused screen: {note}")
    return rest


def _round_cost(sides: list[tuple[JobConfig, bool]], kind: RunKind) -> float:
    """A round's predicted wall time: each side's last run of this kind, else its first run
    (the warm-up of a command screened whole; a focused screen's first round was planned
    by within_budget)."""
    total = 0.0
    for config, on_base in sides:
        wanted = _ON_BASE[kind] if on_base else kind
        run = _latest(config, wanted)
        if run is None and kind is RunKind.timing:
            run = _latest(config, RunKind.base_warmup if on_base else RunKind.warmup)
        total += run.wall_s if run is not None else 0.0
    return total


@dataclass(frozen=True)
class Focus:
    """The tests the focused screen reruns: on the head, and on a pull request's base (those
    of them its survey found there)."""

    head: list[str]
    base: list[str]
    # Kept whatever its focused runs show: a failure, a missing result, a stall, a finding
    # in the previous job, a duration the census's tracer made uncertain.
    sure: frozenset[str] = frozenset()


def survey(
    session: Session,
    job: Job,
    thresholds: Thresholds,
    progress: Progress,
    with_base: bool = False,
    census: SurveyCensus | None = None,
) -> Focus | None:
    """The tests the focused screen reruns, with the head's warm-up round relabelled as the
    survey; None where the whole command is screened: not pytest, fewer than
    focus_min_tests tests, a run that failed as a whole, or nothing the survey could clear.

    With a pull request's base, its warm-up round is surveyed beside the head's, each side
    a configuration of its own: a test that differs between base and head goes on too.
    The run the ``census`` traced is judged less what its tracer added to each test; a
    test whose tracer's share is too large to estimate closely (SurveyCensus.perturbed)
    goes on as if the previous job had flagged it."""
    if not pytest_command.is_pytest(job.command):
        return None
    sides = [("", RunKind.warmup), *([(BASE_SIDE, RunKind.base_warmup)] if with_base else [])]
    runs = {side + config.label: _latest(config, kind) for side, kind in sides for config in job.configs}
    found = {label: run for label, run in runs.items() if run is not None}
    if len(found) < len(runs) or any(
        run.timed_out or run.exit_code not in (0, pytest_command.PYTEST_TESTS_FAILED) for run in found.values()
    ):
        return None
    head_runs = {label: run for label, run in found.items() if not label.startswith(BASE_SIDE)}
    tests = survey_tests(head_runs)
    if len(tests) < thresholds.focus_min_tests:
        return None
    configs = [*job.configs, *(_as_base(config) for config in job.configs if with_base)]
    flagged = (
        flagged_before(session, job)
        | spread_since(session, job, head_runs, thresholds)
        | (census.perturbed() if census is not None else set())
    )
    tracer_s = census.tracer_s() if census is not None else {}
    scores = suspicion(found, configs, thresholds, job.stall_after_s, flagged, tracer_s)
    if len(scores) >= len(survey_tests(found)):
        return None
    for run in head_runs.values():
        run.kind = RunKind.survey
    session.flush()
    kept = within_budget(job, thresholds, found, scores)  # a base's runs are among them
    left_out = [test for test in scores if test not in kept]
    if left_out:
        budget.leave_out(job, thresholds, budget.TESTS, left_out)
    progress(
        f"survey: {len(tests)} tests, {len(tests) - len(scores)} cleared by one run per configuration"
        + (f", {len(kept)} rerun together (the focused screen)" if kept else "")
        + (f", {len(left_out)} left out by the budget (the least suspicious)" if left_out else "")
    )
    on_base = {r.test_id for label, run in found.items() if label.startswith(BASE_SIDE) for r in run.test_results}
    on_head = set(tests)
    sure = frozenset(test for test in kept if scores[test] == CERTAIN or test in flagged)
    return Focus([test for test in kept if test in on_head], [test for test in kept if test in on_base], sure)


def within_budget(job: Job, thresholds: Thresholds, runs: dict[str, Run], scores: dict[str, float]) -> list[str]:
    """The tests the focused screen reruns, in suite order: the most suspicious ones whose
    rounds (as many as a verdict needs) fit in what is left of the budget, each round
    predicted from the survey: every configuration's start-up and the kept tests' durations."""
    durations: dict[str, dict[str, float]] = {}
    for label, run in runs.items():
        for result in run.test_results:
            durations.setdefault(result.test_id, {})[label] = result.duration_s
    # Beside its tests a run costs a fixed start-up and a little per test (collection,
    # reporting): the survey's own share of it, per test, for each test kept.
    fixed = {label: min(_beside_tests_s(run), FOCUS_START_UP_S) for label, run in runs.items()}
    per_test = {
        label: (_beside_tests_s(run) - fixed[label]) / max(1, len(run.test_results)) for label, run in runs.items()
    }
    rounds = budget.rounds_needed(job, thresholds)
    left = budget.remaining_s(job, thresholds)
    round_s = sum(fixed.values())
    kept: set[str] = set()
    # The most suspicious first (among equals, the suite's order); one that does not fit
    # leaves its place to less suspicious ones that do.
    for test_id in sorted(scores, key=lambda test: -scores[test]):
        per_config = durations.get(test_id, {})
        known = list(per_config.values())
        # A configuration without a result (it failed to collect or crashed) costs what the others took.
        # Each test runs twice in a focused process: once cold, once timed (warm.py).
        cost = sum(
            warm.RUNS_PER_TEST * per_config.get(label, max(known, default=0.0)) + per_test[label] for label in runs
        )
        if rounds * (round_s + cost) > left:
            continue
        round_s += cost
        kept.add(test_id)
    return [test for test in scores if test in kept]


# A narrowed pytest run's start-up at most (the interpreter, pytest and its plugins, the
# kept tests' modules): 0.3-0.6 s here.
FOCUS_START_UP_S = 1.0


def _beside_tests_s(run: Run) -> float:
    """What a run of the suite cost beside its tests (start-up, collection, reporting)."""
    return max(0.0, run.wall_s - sum(result.duration_s for result in run.test_results))


# A pull request's base side in the survey: its configurations under their own labels.
BASE_SIDE = "base:"


def _as_base(config: JobConfig) -> JobConfig:
    return JobConfig(label=BASE_SIDE + config.label, cpus=config.cpus, cpuset=config.cpuset, position=config.position)


def focus_ran(job: Job, with_base: bool = False) -> bool:
    """Whether the first focused round ran tests in every configuration, on the base too
    (a node id that pytest cannot collect stops the whole narrowed run: exit 4 or 5)."""
    kinds = [RunKind.focus, *([RunKind.base_focus] if with_base else [])]
    return all(
        (run := _latest(config, kind)) is not None and any(r.outcome == "passed" for r in run.test_results)
        for config in job.configs
        for kind in kinds
    )


def unfocus(job: Job) -> None:
    """Back to the whole suite: the survey is a warm-up again, and the narrowed runs a record."""
    for config in job.configs:
        for run in config.runs:
            if run.kind in (RunKind.survey, RunKind.focus):
                run.kind = RunKind.warmup
            elif run.kind is RunKind.base_focus:
                run.kind = RunKind.base_warmup


def _latest(config: JobConfig, kind: RunKind) -> Run | None:
    runs = [run for run in config.runs if run.kind is kind]
    return runs[-1] if runs else None


T = TypeVar("T")


def round_order(rng: random.Random, configs: list[T]) -> list[T]:
    """This round's order of the configurations (a fresh shuffle every round)."""
    shuffled = list(configs)
    rng.shuffle(shuffled)
    return shuffled


def still_active(
    labels: list[str],
    samples: JobSamples,
    thresholds: Thresholds,
    repetition: int,
    repeat: int,
    configs: list[str] | None = None,
) -> list[str]:
    """The configurations that need more runs after ``repetition`` rounds.

    None stops before min_repetitions (no verdict rests on fewer), nor while any of its
    series is spread out (latency_flaky needs every run it can get). After ``repeat``
    rounds, where ``configs`` (every configuration of the job: a settled one may be
    needed again) is given, the pairs of ``undecided`` series get up to
    ``undecided_extra_runs`` more.
    """
    if repetition >= repeat:
        if configs is not None and repetition < repeat + thresholds.undecided_extra_runs:
            return undecided(configs, samples, thresholds)
        return []
    if repetition < max(thresholds.min_repetitions, thresholds.flaky_min_runs):
        return list(labels)
    return [label for label in labels if not _settled(label, samples, thresholds)]


def undecided(labels: list[str], samples: JobSamples, thresholds: Thresholds) -> list[str]:
    """The configurations of every pair that looks CPU-sensitive on its own but that the
    tests judged cannot call yet: any two configurations of a series whose own rank test
    is under ``cpu_sensitivity_fdr`` with the ratio gates passed (not only the slowest and
    fastest: a third configuration spread over both can hold either end), while the series' p-value
    (services/diagnose/cpu_sensitivity.py) is above what makes even a lone series a
    Benjamini-Hochberg discovery among those judged. The quota's share is left to the
    rule: a pair it explains costs a few runs, never a finding."""
    judged = []
    for test_id, per_config, resolution in samples.series():
        eligible = {
            label: values
            for label, values in per_config.items()
            if label in labels and len(values) >= thresholds.min_repetitions
        }
        if len(eligible) >= 2 and statistics.median([v for vs in eligible.values() for v in vs]) >= resolution:
            judged.append((test_id, eligible, resolution))
    wanted: set[str] = set()
    for test_id, eligible, resolution in judged:
        rng = random.Random(f"undecided\x1f{test_id}")
        decided: bool | None = None  # computed once, for the first pair that needs it
        medians = {label: statistics.median(values) for label, values in eligible.items()}
        for slow, fast in itertools.permutations(eligible, 2):
            if medians[fast] < resolution or medians[slow] - medians[fast] < thresholds.cpu_sensitivity_min_s:
                continue
            if medians[slow] < thresholds.cpu_sensitivity_ratio * medians[fast]:
                continue
            if rank_test([eligible[slow], eligible[fast]], rng) > thresholds.cpu_sensitivity_fdr:
                continue
            if decided is None:  # a discovery whatever the other series say
                p_value = configuration_test(list(eligible.values()), rng)
                # Among every test judged, and those the futility stop cleared (p = 1).
                decided = p_value <= thresholds.cpu_sensitivity_fdr / (len(judged) + len(samples.cleared))
            if not decided:
                wanted |= {slow, fast}
    return [label for label in labels if label in wanted]


def _settled(label: str, samples: JobSamples, thresholds: Thresholds) -> bool:
    """Settled against every other configuration, for the command and for every test.

    A configuration whose own runs are far apart is never settled: every further run
    helps tell a two-mode latency from noise (the latency_flaky rule). A series below
    its clock's resolution is too fast to judge: more runs cannot help it.
    """
    if not samples.wall.get(label) and samples.failed.get(label, 0) >= thresholds.min_repetitions:
        return True  # it failed every time: more runs only repeat the failure
    for _, per_config, resolution in samples.series():
        mine = per_config.get(label)
        if not mine:
            continue
        if len(mine) < thresholds.min_repetitions:
            return False
        if statistics.median(mine) < resolution:
            continue
        if spread_out(mine, thresholds):
            return False
        for other, values in per_config.items():
            if other == label or not values:
                continue
            a, b = median_interval(mine), median_interval(values)
            if max(a.ci_high, b.ci_high) - min(a.ci_low, b.ci_low) < thresholds.cpu_sensitivity_min_s:
                continue  # even the extremes are closer than the absolute floor
            if not pair_settled(a, b, thresholds.cpu_sensitivity_ratio):
                return False
    return True


def _progress_line(
    job_config: JobConfig, kind: RunKind, repetition: int, repeat: int, result: RunResult, tests: int
) -> str:
    if kind in (RunKind.warmup, RunKind.base_warmup):
        parts = [f"{job_config.label}: warm-up run {result.wall_s:.3f} s (not counted)"]
    elif kind is RunKind.focus:
        parts = [f"{job_config.label}: focused run {repetition}/{repeat} {result.wall_s:.3f} s"]
    else:
        parts = [f"{job_config.label}: run {repetition}/{repeat} {result.wall_s:.3f} s"]
    if result.exit_code != 0:
        parts.append(f"exit {result.exit_code}")
    if result.timed_out:
        parts.append("timed out")
    if result.nr_throttled:
        parts.append(f"throttled {result.nr_throttled}/{result.nr_periods} periods")
    if tests:
        parts.append(f"{tests} tests")
    if result.foreign_cpus > hostload.BUSY_MACHINE_CPUS:
        parts.append(f"machine busy: other processes used {result.foreign_cpus:.1f} CPUs")
    return ", ".join(parts)
