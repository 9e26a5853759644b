"""A job's time budget (docs/explanations/cost-model.md): how long its runs may take in all, and what it left out.

The budget counts the wall time of every run the job stored (survey, warm-up, timing,
focused, evidence), so a screen and a drill on different workers, or a step
resumed after a crash, read the same figure from the database. The first round (one run
per configuration: the survey of a suite, the warm-up of a command) always runs; it is
what the default is measured on (the survey's run in that configuration is the one the
census traces: its default includes the tracer's few per cent). After it, each focused or timing round and each
evidence run goes ahead only when its predicted cost still fits, so a job stops before
its budget is exceeded (by one run's misprediction at most) and never runs unbounded.

The default is ``budget_multiple`` x the first run in the configuration with the most
CPUs (the suite's own time on all cores), never below ``budget_floor_s`` (a command
screened whole, not surveyed, also gets the rounds a verdict needs on top; a pull
request, whose base is screened beside its head, twice all that): a small
program keeps today's full screen and drill, a suite of real size spends a few times its
own time. What does not fit is named in ``job.budget`` (and the report): the tests the
focused screen left out (the least suspicious first), the rounds it could not run, and
the drill's targets (and, in jobs of earlier versions, the census, then a run of its own).
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from typing import Any

from services.measure.configs import cpu_config
from services.measure.pytest_command import PYTEST_TESTS_FAILED
from services.models import Job, JobConfig, Run, RunKind
from services.thresholds import Thresholds

FIRST_ROUND = (RunKind.survey, RunKind.warmup, RunKind.timing)


def spent_s(job: Job) -> float:
    """The wall time of every run the job stored so far."""
    return sum(run.wall_s for config in job.configs for run in config.runs)


def widest(job: Job) -> JobConfig | None:
    """The configuration with the most CPUs (no quota first: a quota slows the suite)."""
    if not job.configs:
        return None
    return max(job.configs, key=lambda c: (c.cpus is None, cpu_config(c).effective_cpus, -c.position))


def reference_s(job: Job) -> float | None:
    """The suite's own time: its first run in the configuration with the most CPUs (of a
    job screened in shards, each shard's first run there, summed: every shard surveyed its
    part of the suite; inside one shard's screen, that shard's part)."""
    config = widest(job)
    first: dict[int | None, Run] = {}
    for run in config.runs if config else []:
        # A gate's first run is the whole suite's (services/jobs/gate.py); its later ones
        # and the matrix after it are narrowed to some tests.
        if run.kind in FIRST_ROUND or (run.kind is RunKind.gate and run.repetition == 0):
            first.setdefault(run.shard, run)
    return sum(run.wall_s for run in first.values()) if first else None


def untraced_suite_s(job: Job) -> tuple[float, str, bool] | None:
    """(seconds, configuration label, traced) of the suite's own time as a user's stopwatch
    would take it: the median of its untraced whole runs that ran to their end (a run in
    which some test failed timed the suite all the same) in the configuration with the most
    CPUs, else in the first configuration that has some. A warm-up counts only where no
    later run timed the whole command (a small program's warm-up is as long as its timing
    runs; a cold .pyc write is noise at this scale). ``traced`` True: no whole run went
    untraced anywhere (one configuration, whose survey run the census traced), so its
    traced run stands in, and the figure says so. The unit of the report's cost ratios
    (docs/explanations/cost-model.md); the budget's own limit stays on ``reference_s``."""
    gate_first = (RunKind.gate, 0)
    ordered = sorted(job.configs, key=lambda c: (c is not widest(job), c.position))

    def whole(run: Run) -> bool:
        ended = not run.timed_out and run.exit_code in (0, PYTEST_TESTS_FAILED)
        timed = run.kind in (RunKind.timing, RunKind.survey) or (run.kind, run.repetition) == gate_first
        return ended and timed

    for traced in (False, True):
        for config in ordered:
            runs = [run for run in config.runs if whole(run) and run.traced is traced]
            if not runs:
                runs = [
                    run
                    for run in config.runs
                    if run.kind is RunKind.warmup
                    and run.traced is traced
                    and not run.timed_out
                    and run.exit_code in (0, PYTEST_TESTS_FAILED)
                ]
            if runs:
                return statistics.median(run.wall_s for run in runs), config.label, traced
    return None


def split_s(job: Job) -> dict[str, float]:
    """The runs' wall time by what they were for: ``command`` (the screen's and a gate's
    runs of the project's command), ``evidence`` (probes, and the survey's run the census
    traced), ``calibration`` (a gate's runs of lagtrace's own loop)."""
    split = {"command": 0.0, "evidence": 0.0, "calibration": 0.0}
    for config in job.configs:
        for run in config.runs:
            if run.kind is RunKind.calibration:
                split["calibration"] += run.wall_s
            else:
                split["evidence" if run.kind is RunKind.evidence or run.traced else "command"] += run.wall_s
    return split


def job_wall_s(job: Job, now: dt.datetime | None = None) -> float | None:
    """The job's whole wall time, created to finished (to ``now`` while it runs): what a
    stopwatch beside it reads, with cloning, preparing, containers and storing in it."""
    if job.created_at is None:
        return None
    end = job.finished_at or now or dt.datetime.now(dt.UTC)
    return max(0.0, (_aware(end) - _aware(job.created_at)).total_seconds())


def _aware(moment: dt.datetime) -> dt.datetime:
    # SQLite hands back naive datetimes; every one lagtrace stores is UTC (models.utcnow).
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


def limit_s(job: Job, thresholds: Thresholds) -> float | None:
    """The budget: the one asked for, else the default once the first round measured the
    suite (None before: nothing limits the first round but the run timeout)."""
    if job.budget_s is not None:
        return job.budget_s
    reference = reference_s(job)
    if reference is None:
        return None
    default = thresholds.budget_multiple * reference
    if not any(run.kind is RunKind.survey for config in job.configs for run in config.runs):
        # A command screened whole judges nothing below rounds_needed rounds of every
        # configuration: the default covers them, then the multiple for the drill.
        first = [next((run for run in c.runs if run.kind in FIRST_ROUND), None) for c in job.configs]
        default += rounds_needed(job, thresholds) * sum(run.wall_s for run in first if run is not None)
    if any(run.kind in BASE_KINDS for config in job.configs for run in config.runs):
        default *= 2  # a pull request's base is screened beside its head: two suites' worth
    return max(thresholds.budget_floor_s, default)


BASE_KINDS = (RunKind.base, RunKind.base_warmup, RunKind.base_focus)


def rounds_needed(job: Job, thresholds: Thresholds) -> int:
    """The timing rounds after the first that a verdict needs (fewer runs judge nothing)."""
    return min(job.repeat, max(thresholds.min_repetitions, thresholds.flaky_min_runs))


def remaining_s(job: Job, thresholds: Thresholds) -> float:
    limit = limit_s(job, thresholds)
    return math.inf if limit is None else limit - spent_s(job)


def fits(job: Job, thresholds: Thresholds, cost_s: float) -> bool:
    """Whether a step predicted to take ``cost_s`` still fits in what is left."""
    return cost_s <= remaining_s(job, thresholds)


# What the budget can leave out, as the report's budget.left_out keys.
TESTS, ROUNDS, CENSUS, DRILL = "tests", "rounds", "census", "drill"


def leave_out(job: Job, thresholds: Thresholds, what: str, items: list[str]) -> None:
    """Record that the budget left ``items`` of ``what`` out (added to what it left before)."""
    state = record(job, thresholds)
    left = dict(state.get("left_out") or {})
    left[what] = list(dict.fromkeys([*left.get(what, []), *items]))
    job.budget = {**state, "left_out": left}


def left_out_tests(job: Job) -> list[str]:
    """The tests the budget left out of the focused screen (``leave_out`` with TESTS)."""
    left = (job.budget or {}).get("left_out") or {}
    return list(left.get(TESTS, []))


def record(job: Job, thresholds: Thresholds) -> dict[str, Any]:
    """The budget as stored on the job (limit and whether it was given), brought up to date."""
    state = dict(job.budget or {})
    limit = limit_s(job, thresholds)
    state.update({"limit_s": round(limit, 3) if limit is not None else None, "given": job.budget_s is not None})
    state.setdefault("left_out", {})
    job.budget = state
    return state


def forget(job: Job, *whats: str) -> None:
    """Forget what an earlier attempt left out of ``whats`` (its runs are dropped and run
    again); all of it when none is named."""
    if not job.budget:
        return
    left = {key: items for key, items in (job.budget.get("left_out") or {}).items() if whats and key not in whats}
    job.budget = {**job.budget, "left_out": left}
