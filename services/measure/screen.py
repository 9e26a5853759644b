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

A pull request's job also screens its base commit (``base``): each configuration's base
and head runs are shuffled into the same rounds, on the same node, so that whatever the
machine does meanwhile falls on both sides alike.
"""

from __future__ import annotations

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

from services.measure import hostload
from services.measure.executors.base import Executor, RunResult
from services.measure.runs import run_once
from services.measure.samples import JobSamples, collect
from services.measure.stats import median_interval, pair_settled
from services.models import Job, JobConfig, RunKind
from services.thresholds import Thresholds

Progress = Callable[[str], None]


@dataclass
class BaseSide:
    """The base commit's checkout, its executor (prepared on it), and when its runs may stop:
    ``needs_runs`` answers, after each round, which configurations the comparison wants more of."""

    workdir: Path
    executor: Executor
    needs_runs: Callable[[list[str]], list[str]]


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
) -> None:
    """Run the timing screen for all of ``job``'s configurations, storing every run as it finishes.

    ``checkpoint`` is called after each stored run: the caller commits there, so a
    killed lagtrace loses at most the run in flight (and a cancelled job stops).
    """
    active = list(job.configs)
    if job.screen_seed is None:
        job.screen_seed = secrets.randbits(32)
    order = random.Random(job.screen_seed)
    scratch = Path(tempfile.mkdtemp(prefix=f"lagtrace-job{job.id}-"))

    sides = [False, True] if base is not None else [False]
    # (label, on_base) of each side whose warm-up hit the timeout: never run again.
    hung: set[tuple[str, bool]] = set()

    def measure(job_config: JobConfig, kind: RunKind, repetition: int, on_base: bool = False) -> None:
        run_dir = scratch / f"{job_config.position}-{repetition}{'-base' if on_base else ''}"
        run_dir.mkdir()
        if on_base and base is not None:
            kind = RunKind.base_warmup if kind is RunKind.warmup else RunKind.base
        measured = run_once(
            session,
            base.executor if on_base and base is not None else executor,
            job_config,
            command=job.command,
            workdir=base.workdir if on_base and base is not None else workdir,
            run_dir=run_dir,
            timeout_s=job.timeout_s,
            kind=kind,
            repetition=repetition,
        )
        line = _progress_line(job_config, kind, repetition, job.repeat, measured.result, len(measured.cases))
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
        for job_config, on_base in round_order(order, this_round()):
            measure(job_config, RunKind.warmup, 0, on_base)
        # A configuration that hung measured all it will: its verdict (it hangs) is settled.
        active = [c for c in active if (c.label, False) not in hung]
        for repetition in range(1, job.repeat + 1):
            if not this_round():
                break
            for job_config, on_base in round_order(order, this_round()):
                measure(job_config, RunKind.timing, repetition, on_base)
            labels = [c.label for c in active]
            still = still_active(labels, collect(job), thresholds, repetition, job.repeat)
            if base is not None and repetition < job.repeat:
                still = [*still, *(label for label in base.needs_runs(labels) if label not in still)]
            for done in active:
                if done.label not in still and repetition < job.repeat:
                    progress(f"{done.label}: verdict settled after {repetition} runs")
            active = [c for c in active if c.label in still]
            if not active:
                break
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


T = TypeVar("T")


def round_order(rng: random.Random, configs: list[T]) -> list[T]:
    """This round's order of the configurations (a fresh shuffle every round)."""
    shuffled = list(configs)
    rng.shuffle(shuffled)
    return shuffled


def still_active(
    labels: list[str], samples: JobSamples, thresholds: Thresholds, repetition: int, repeat: int
) -> list[str]:
    """The configurations that need more runs after ``repetition`` rounds.

    None stops before min_repetitions (no verdict rests on fewer), nor while any of its
    series is spread out (latency_flaky needs every run it can get).
    """
    if repetition >= repeat:
        return []
    if repetition < max(thresholds.min_repetitions, thresholds.flaky_min_runs):
        return list(labels)
    return [label for label in labels if not _settled(label, samples, thresholds)]


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
        if _spread_out(mine, thresholds):
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


def _spread_out(values: list[float], thresholds: Thresholds) -> bool:
    low, high = min(values), max(values)
    return high >= thresholds.flaky_gap_ratio * low and high - low >= thresholds.flaky_min_spread_s


def _progress_line(
    job_config: JobConfig, kind: RunKind, repetition: int, repeat: int, result: RunResult, tests: int
) -> str:
    if kind in (RunKind.warmup, RunKind.base_warmup):
        parts = [f"{job_config.label}: warm-up run {result.wall_s:.3f} s (not counted)"]
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
