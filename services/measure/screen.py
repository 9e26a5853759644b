"""The timing screen: repetitions of the command in every configuration, no tracer.

Repetitions are interleaved (one run of each configuration per round) so that drift
on a noisy machine spreads over all configurations instead of biasing one. A
configuration stops early once more runs cannot change its verdict against any other.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from sqlalchemy.orm import Session

from services.measure import hostload
from services.measure.executors.base import Executor, RunResult
from services.measure.runs import run_once
from services.measure.samples import JobSamples, collect
from services.measure.stats import median_interval, pair_settled
from services.models import Job, JobConfig, RunKind
from services.thresholds import Thresholds

Progress = Callable[[str], None]


def screen(
    session: Session,
    job: Job,
    executor: Executor,
    thresholds: Thresholds,
    *,
    workdir: Path,
    progress: Progress = lambda message: None,
    checkpoint: Callable[[], None] = lambda: None,
) -> None:
    """Run the timing screen for all of ``job``'s configurations, storing every run as it finishes.

    ``checkpoint`` is called after each stored run: the caller commits there, so a
    killed lagtrace loses at most the run in flight (and a cancelled job stops).
    """
    active = list(job.configs)
    scratch = Path(tempfile.mkdtemp(prefix=f"lagtrace-job{job.id}-"))
    try:
        for repetition in range(1, job.repeat + 1):
            for job_config in active:
                run_dir = scratch / f"{job_config.position}-{repetition}"
                run_dir.mkdir()
                measured = run_once(
                    session,
                    executor,
                    job_config,
                    command=job.command,
                    workdir=workdir,
                    run_dir=run_dir,
                    timeout_s=job.timeout_s,
                    kind=RunKind.timing,
                    repetition=repetition,
                )
                checkpoint()
                progress(_progress_line(job_config, repetition, job.repeat, measured.result, len(measured.cases)))
            if repetition >= thresholds.min_repetitions and repetition < job.repeat:
                samples = collect(job)
                still = [c for c in active if not _settled(c.label, samples, thresholds)]
                for done in active:
                    if done not in still:
                        progress(f"{done.label}: verdict settled after {repetition} runs")
                active = still
                if not active:
                    break
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _settled(label: str, samples: JobSamples, thresholds: Thresholds) -> bool:
    """Settled against every other configuration, for the command and for every test.

    A configuration whose own runs are far apart is never settled: every further run
    helps tell a two-mode latency from noise (the latency_flaky rule).
    """
    series = [samples.wall, *samples.tests.values()]
    for per_config in series:
        mine = per_config.get(label)
        if not mine:
            continue
        if _spread_out(mine, thresholds):
            return False
        for other, values in per_config.items():
            if other == label or not values:
                continue
            if not pair_settled(median_interval(mine), median_interval(values), thresholds.cpu_sensitivity_ratio):
                return False
    return True


def _spread_out(values: list[float], thresholds: Thresholds) -> bool:
    low, high = min(values), max(values)
    return high >= thresholds.flaky_gap_ratio * low and high - low >= thresholds.flaky_min_spread_s


def _progress_line(job_config: JobConfig, repetition: int, repeat: int, result: RunResult, tests: int) -> str:
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
