"""How often cpu_sensitivity cries wolf, and how small a real slowdown it still sees.

Simulates jobs of three identical CPU configurations (the default matrix's labels) on a
pytest suite whose tests have noisy or bimodal latency, through the real screen loop
(round order, warm-up, early stopping: services.measure.screen) and the real rules
(cpu_sensitivity, latency_flaky). Only the programs are synthetic: each "run" draws
its test durations, rounded to JUnit's 1 ms, instead of starting a process.

    .venv/bin/python -m tests.bench.bench_false_positives          # quick: 200 jobs
    .venv/bin/python -m tests.bench.bench_false_positives --full   # 1000 jobs, repeat 9 too

Targets: at most 1 % false cpu_sensitivity findings per test; the table also gives
the smallest slowdown of one configuration found with 80 % power, per noise level.
``run()`` returns the figures as a dict for `make bench`.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from services.diagnose import cpu_sensitivity, latency_flaky
from services.measure.pytest_command import JUNIT_RESOLUTION_S
from services.measure.samples import JobSamples
from services.measure.screen import round_order, still_active
from services.measure.survey import cleared_in_rounds
from services.models import JobConfig, Run, RunKind
from services.thresholds import Thresholds
from tests.unit.jobs import run as make_run

CONFIGS = ["cpuset=0", "cpuset=0-1", "cpus=0.5"]
# The configurations as the futility stop sees them: identical, so no quota explains anything.
FOCUS_CONFIGS = [JobConfig(label=label, position=i) for i, label in enumerate(CONFIGS)]
SLOW_CONFIG = "cpus=0.5"
TESTS = 10
STARTUP_S = 0.3  # pytest's own start-up, in the whole command's wall time

Draw = Callable[[random.Random, float], float]


@dataclass(frozen=True)
class Noise:
    name: str
    draw: Draw  # one duration around a base latency


def lognormal(sigma: float) -> Draw:
    return lambda rng, base: base * math.exp(rng.gauss(0.0, sigma))


def bimodal(slow_share: float, factor: float, sigma: float) -> Draw:
    # A hidden state (a cold cache, a retry): some runs take the slow path.
    def draw(rng: random.Random, base: float) -> float:
        value = base * math.exp(rng.gauss(0.0, sigma))
        return value * factor if rng.random() < slow_share else value

    return draw


NOISES = [
    Noise("quiet (lognormal 5 %)", lognormal(0.05)),
    Noise("noisy (lognormal 30 %)", lognormal(0.30)),
    Noise("bimodal (30 % of runs 5x)", bimodal(0.30, 5.0, 0.10)),
    Noise("bimodal (50 % of runs 10x)", bimodal(0.50, 10.0, 0.10)),
]


def _base_latencies(rng: random.Random) -> list[float]:
    # A suite's spread of test latencies: sub-millisecond to a few hundred ms.
    return [10 ** rng.uniform(-3.5, -0.5) for _ in range(TESTS)]


def simulate_job(
    rng: random.Random,
    noise: Noise,
    thresholds: Thresholds,
    repeat: int,
    slowdown: float = 1.0,
    measurable_first: bool = False,
    first: Callable[[random.Random, str, float], float] | None = None,
    futility: int = 0,
) -> tuple[JobSamples, list[float]]:
    """One job's screen: interleaved rounds, warm-up discarded, early stopping as the screen does.

    ``futility`` > 0: the focused screen's futility stop (services/measure/survey.py
    cleared_in_rounds) after that many rounds: the tests it clears are not run again.

    ``slowdown`` multiplies test 0's latency in SLOW_CONFIG (1.0: identical configurations);
    ``measurable_first`` gives test 0 20-100 ms, so that the absolute floor, not the
    clock, is what hides small slowdowns. ``first``, where given, reshapes test 0's drawn
    duration per configuration instead.
    """
    bases = _base_latencies(rng)
    if measurable_first:
        bases[0] = rng.uniform(0.02, 0.1)
    samples = JobSamples(wall={label: [] for label in CONFIGS})
    tests: dict[str, dict[str, list[float]]] = {f"t{i:02d}": {label: [] for label in CONFIGS} for i in range(TESTS)}
    samples.tests = tests
    order = random.Random(rng.random())
    active = list(CONFIGS)

    def one_run(label: str) -> tuple[float, list[float]]:
        durations = []
        for i, base in enumerate(bases):
            value = noise.draw(rng, base)
            if i == 0 and first is not None:
                value = first(rng, label, value)
            elif i == 0 and label == SLOW_CONFIG:
                value *= slowdown
            durations.append(round(value, 3))  # JUnit's time="%.3f"
        return STARTUP_S * math.exp(rng.gauss(0, 0.05)) + sum(durations), durations

    for label in round_order(order, active):
        one_run(label)  # the warm-up: drawn (it costs its randomness) and discarded
    cleared: set[str] = set()
    rounds: list[dict[str, Run]] = []
    for repetition in range(1, repeat + thresholds.undecided_extra_runs + 1):
        this_round: dict[str, Run] = {}
        for label in round_order(order, active):
            wall, durations = one_run(label)
            samples.wall[label].append(wall)
            ran = {f"t{i:02d}": duration for i, duration in enumerate(durations) if f"t{i:02d}" not in cleared}
            for test_id, duration in ran.items():
                tests[test_id][label].append(duration)
            if repetition <= futility:
                # Only the futility stop below reads ``rounds``, once, after ``futility`` rounds:
                # a Run (an ORM object, most of a job's simulation time) built for a later round
                # or without the stop is never read, and building it draws no randomness.
                this_round[label] = make_run(wall, user_s=wall, tests=ran, kind=RunKind.focus, repetition=repetition)
        if repetition <= futility:
            rounds.append(this_round)
        if futility and repetition == futility:
            cleared |= set(cleared_in_rounds(rounds, FOCUS_CONFIGS, thresholds, list(tests)))
            samples.cleared = cleared
        active = still_active(active, samples, thresholds, repetition, repeat, CONFIGS)
        if not active:
            break
    return samples, bases


def false_positive_rate(
    noise: Noise, jobs: int, thresholds: Thresholds, repeat: int, seed: int, futility: int = 0
) -> dict[str, float | int]:
    rng = random.Random(seed)
    false_tests = jobs_with_any = flaky = 0
    judged = 0
    runs = test_runs = 0
    for job in range(jobs):
        samples, _ = simulate_job(rng, noise, thresholds, repeat, futility=futility)
        drafts = cpu_sensitivity.judge(samples, thresholds, seed=job)
        judged += len(cpu_sensitivity.candidates(samples, thresholds, seed=job))
        hits = [d for d in drafts if d.test_id is not None]
        false_tests += len(hits)
        jobs_with_any += bool(drafts)
        flaky += sum(1 for d in latency_flaky.judge(samples, thresholds) if d.test_id is not None)
        runs += sum(len(v) for v in samples.wall.values())
        test_runs += sum(len(values) for per_config in samples.tests.values() for values in per_config.values())
    return {
        "false_per_test": false_tests / (jobs * TESTS),
        "false_jobs": jobs_with_any / jobs,
        "judged_share": judged / (jobs * (TESTS + 1)),
        "flaky_per_test": flaky / (jobs * TESTS),
        "runs_per_config": runs / (jobs * len(CONFIGS)),
        # What the tests cost: the futility stop reruns fewer of them.
        "test_runs_per_config": test_runs / (jobs * TESTS * len(CONFIGS)),
    }


def smallest_detected(
    noise: Noise, jobs: int, thresholds: Thresholds, repeat: int, seed: int, power: float = 0.8, futility: int = 0
) -> float | None:
    """The smallest slowdown of test 0 (20-100 ms) in one configuration found in ``power`` of the jobs."""
    for factor in (1.5, 2.0, 2.5, 3.0, 4.0, 6.0, 10.0):
        rng = random.Random(seed)
        found = 0
        for job in range(jobs):
            samples, _ = simulate_job(
                rng, noise, thresholds, repeat, slowdown=factor, measurable_first=True, futility=futility
            )
            drafts = cpu_sensitivity.judge(samples, thresholds, seed=job)
            found += any(d.test_id == "t00" and d.config_label == SLOW_CONFIG for d in drafts)
        if found / jobs >= power:
            return factor
    return None


def hidden_pair(rng: random.Random, label: str, value: float) -> float:
    """The websocket test of docs/explanations/statistics.md: 15 ms on two cores, 3.7x pinned to one, and under the
    quota sometimes as fast as two cores and sometimes slower than one (throttled or not)."""
    if label == "cpuset=0":
        return value * 3.7
    if label == "cpus=0.5":
        return value * (0.9 if rng.random() < 0.5 else 5.0)
    return value


def hidden_pair_found(jobs: int, thresholds: Thresholds, repeat: int, seed: int) -> dict[str, float]:
    """The share of jobs whose test 0, shaped by ``hidden_pair``, is found, and its runs."""
    rng = random.Random(seed)
    found = runs = 0
    for job in range(jobs):
        samples, _ = simulate_job(rng, NOISES[0], thresholds, repeat, measurable_first=True, first=_at_15_ms)
        found += any(d.test_id == "t00" for d in cpu_sensitivity.judge(samples, thresholds, seed=job))
        runs += len(samples.tests["t00"]["cpuset=0"])
    return {"found": found / jobs, "runs_pinned": runs / jobs}


def _at_15_ms(rng: random.Random, label: str, value: float) -> float:
    return round(hidden_pair(rng, label, 0.015 * math.exp(rng.gauss(0.0, 0.05))), 3)


def run(quick: bool = True, seed: int = 20261122) -> dict[str, object]:
    thresholds = Thresholds()
    repeats = [thresholds.min_repetitions] if quick else [thresholds.min_repetitions, 9]
    # Quick is `make bench QUICK=1`'s smoke run (CI): a fifth of the jobs, so each rate's
    # interval is wider (1 % of 200 jobs x 10 tests is 20 false findings, not 100).
    jobs = 200 if quick else 1000
    power_jobs = 100 if quick else 1000
    started = time.perf_counter()
    rows = []
    # Each row without and with the focused screen's futility stop (survey.cleared_in_rounds).
    stops = [0, thresholds.focus_futility_runs] if thresholds.focus_futility_runs else [0]
    for repeat in repeats:
        for noise in NOISES:
            for stop in stops:
                figures = false_positive_rate(noise, jobs, thresholds, repeat, seed, futility=stop)
                smallest = smallest_detected(noise, power_jobs, thresholds, repeat, seed + 1, futility=stop)
                rows.append(
                    {
                        "noise": noise.name,
                        "repeat": repeat,
                        "futility": stop,
                        **figures,
                        "smallest_slowdown_80": smallest,
                    }
                )
    worst = max(row["false_per_test"] for row in rows)  # type: ignore[type-var]
    hidden = {
        extra: hidden_pair_found(
            power_jobs, thresholds.model_copy(update={"undecided_extra_runs": extra}), repeats[0], seed + 2
        )
        for extra in (0, thresholds.undecided_extra_runs)
    }
    result = {
        "jobs": jobs,
        "configs": CONFIGS,
        "tests_per_job": TESTS,
        "fdr": thresholds.cpu_sensitivity_fdr,
        "resolution_s": JUNIT_RESOLUTION_S,
        "rows": rows,
        "worst_false_per_test": worst,
        "target_false_per_test": 0.01,
        "meets_target": worst <= 0.01,
        "hidden_pair": {str(extra): figures for extra, figures in hidden.items()},
        "seconds": time.perf_counter() - started,
    }
    _print(result)
    return result


def _print(result: dict) -> None:
    print(
        f"cpu_sensitivity on {result['jobs']} simulated jobs x {result['tests_per_job']} tests, "
        f"3 identical configurations, FDR {result['fdr']:g}, JUnit resolution {result['resolution_s'] * 1000:g} ms"
    )
    header = f"{'noise':28} {'repeat':>6} {'stop':>4} {'runs/cfg':>8} {'test runs':>9} {'judged':>7} {'false/test':>10} {'false/job':>9} "
    header += f"{'flaky/test':>10} {'80% power at':>12}"
    print(header)
    print("-" * len(header))
    for row in result["rows"]:
        smallest = f"{row['smallest_slowdown_80']:g}x" if row["smallest_slowdown_80"] else "> 10x"
        print(
            f"{row['noise']:28} {row['repeat']:>6} {row['futility'] or '-':>4} {row['runs_per_config']:>8.2f} {row['test_runs_per_config']:>9.2f} {row['judged_share']:>7.0%} "
            f"{row['false_per_test']:>10.2%} {row['false_jobs']:>9.1%} {row['flaky_per_test']:>10.2%} {smallest:>12}"
        )
    for extra, figures in result["hidden_pair"].items():
        print(
            f"a pair apart with the third configuration spread over both (docs/explanations/statistics.md), {extra} extra runs: "
            f"found in {figures['found']:.0%} of jobs, {figures['runs_pinned']:.1f} runs pinned"
        )
    verdict = "meets" if result["meets_target"] else "MISSES"
    print(
        f"worst false cpu_sensitivity rate per test {result['worst_false_per_test']:.2%} ({verdict} the 1 % target); "
        f"{result['seconds']:.0f} s"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--full", action="store_true", help="1000 jobs per power point, and repeat 9")
    parser.add_argument("--seed", type=int, default=20261122)
    args = parser.parse_args(argv)
    result = run(quick=not args.full, seed=args.seed)
    return 0 if result["meets_target"] else 1


if __name__ == "__main__":
    sys.exit(main())
