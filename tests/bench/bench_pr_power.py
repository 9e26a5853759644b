"""How small a regression a pull request's base-against-head comparison finds (docs/explanations/statistics.md).

Simulates the comparison of suites of 500 tests, each run ``repeat`` times on the base
and on the head, through the real statistics (services/jobs/pull_requests.py compare:
rank test, Benjamini-Hochberg over the suite, bootstrap interval of the ratio of medians,
the ``base_change_ratio`` gate and the 10 ms floor). In each suite 50 tests are made
slower by a planted factor and 450 are left alone, so one suite gives both the power
(the slowed tests found "regressed") and the false alarms (unchanged tests called
"regressed"). As the screen does, a survey run a side comes first and only the tests it
keeps are compared: over a whole suite of 500, at 5 runs a side, the rank test's
smallest p-value (0.008) never passes Benjamini-Hochberg unless a sixth of the tests
moved. Durations are drawn around a base latency of 50 ms to 1 s (log-uniform:
tests long enough for a 10 % change to clear the floor), with lognormal noise, rounded
to JUnit's 1 ms.

    .venv/bin/python -m tests.bench.run --only pr_power [--quick]

Targets (docs/measurements/statistics.md): a 10 % regression found with 80 % power on a quiet node with the
default repeats; false "regressed" at most 1 % of tests.
"""

from __future__ import annotations

import math
import random

from services.jobs.pull_requests import REGRESSED, compare
from services.measure.samples import JobSamples
from services.measure.survey import candidates
from services.models import JobConfig, Run, RunKind, TestResult
from services.thresholds import Thresholds
from tests.bench.figures import Figure

TESTS = 500
SLOWED = 50
LABEL = "cpuset=0-1"
# Noise as a coefficient of variation: CodSpeed measured 2.66 % on shared CI runners.
NOISES = {"quiet (2.66 %)": 0.0266, "5 %": 0.05, "10 %": 0.10, "30 %": 0.30}
SLOWDOWNS = (1.1, 1.2, 1.3, 1.5, 2.0)
TARGET_SLOWDOWN = 1.1
TARGET_POWER = 0.8
TARGET_FALSE = 0.01


def _runs(rng: random.Random, base_s: float, sigma: float, repeat: int) -> list[float]:
    return [max(0.001, round(base_s * math.exp(rng.gauss(0.0, sigma)), 3)) for _ in range(repeat)]


def _survey_run(label: str, durations: dict[str, float]) -> Run:
    wall = sum(durations.values()) + 0.3
    return Run(
        kind=RunKind.survey,
        wall_s=wall,
        user_s=0.1 * wall,
        sys_s=0.0,
        exit_code=0,
        timed_out=False,
        test_results=[TestResult(test_id=t, duration_s=d, outcome="passed") for t, d in durations.items()],
    )


def simulate_suite(
    rng: random.Random, sigma: float, slowdown: float, repeat: int, tests: int, surveyed: bool = True
) -> tuple[int, int, int]:
    """(slowed tests found regressed, unchanged tests called regressed, tests compared) in
    one suite. ``surveyed``: as the screen does now, a survey run a side first, and only
    the tests it keeps compared over ``repeat`` runs a side (services/measure/survey.py)."""
    latencies = [10 ** rng.uniform(math.log10(0.05), 0.0) for _ in range(tests)]
    slowed = {f"t{index}" for index in range(tests * SLOWED // TESTS)}
    factor = {f"t{i}": (slowdown if f"t{i}" in slowed else 1.0) for i in range(tests)}
    kept = list(factor)
    if surveyed:
        thresholds = Thresholds()
        runs = {
            LABEL: _survey_run(LABEL, {t: _runs(rng, latencies[i], sigma, 1)[0] for i, t in enumerate(factor)}),
            "base:" + LABEL: _survey_run(
                LABEL, {t: _runs(rng, latencies[i] * factor[t], sigma, 1)[0] for i, t in enumerate(factor)}
            ),
        }
        configs = [JobConfig(label=label, position=0) for label in runs]
        kept = candidates(runs, configs, thresholds)
    base, head = JobSamples(), JobSamples()
    for test in kept:
        latency = latencies[int(test[1:])]
        base.tests[test] = {LABEL: _runs(rng, latency, sigma, repeat)}
        head.tests[test] = {LABEL: _runs(rng, latency * factor[test], sigma, repeat)}
    changes = compare(base, head, Thresholds(), seed=rng.randrange(1 << 30))
    found = sum(1 for c in changes if c.verdict == REGRESSED and c.test_id in slowed)
    false = sum(1 for c in changes if c.verdict == REGRESSED and c.test_id not in slowed)
    return found, false, len(kept)


def run(quick: bool = False) -> dict:
    repeat = Thresholds().min_repetitions
    tests = 200 if quick else TESTS
    suites = 1 if quick else 2
    noises = dict(list(NOISES.items())[:2]) if quick else NOISES
    rng = random.Random(24)
    figures, rows = [], []
    for name, sigma in noises.items():
        powers: dict[float, float] = {}
        false_alarms = unchanged = 0
        for slowdown in SLOWDOWNS:
            found = 0
            for _ in range(suites):
                hit, false, _compared = simulate_suite(rng, sigma, slowdown, repeat, tests)
                found += hit
                false_alarms += false
                unchanged += tests - tests * SLOWED // TESTS
            powers[slowdown] = found / (suites * tests * SLOWED // TESTS)
        smallest = min((s for s, p in powers.items() if p >= TARGET_POWER), default=None)
        false_rate = false_alarms / unchanged
        rows.append({"noise": name, "power": powers, "smallest_80": smallest, "false_regressed": false_rate})
        figures += [
            Figure(
                f"smallest regression found, 80 % power: {name}, repeat {repeat}",
                smallest if smallest is not None else math.inf,
                "x",
                target=f"<= {TARGET_SLOWDOWN}x" if sigma == NOISES["quiet (2.66 %)"] else None,
                met=(smallest is not None and smallest <= TARGET_SLOWDOWN)
                if sigma == NOISES["quiet (2.66 %)"]
                else None,
                n=suites * tests * SLOWED // TESTS,
                note=", ".join(f"{s:g}x: {p:.0%}" for s, p in powers.items()),
            ),
            Figure(
                f"false 'regressed' per unchanged test: {name}",
                100 * false_rate,
                "%",
                target=f"<= {100 * TARGET_FALSE:g} %",
                met=false_rate <= TARGET_FALSE,
                n=unchanged,
            ),
        ]
    return {"figures": figures, "rows": rows, "base_change_ratio": Thresholds().base_change_ratio}
