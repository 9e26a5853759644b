"""slower_since on simulated branch histories, searched after every push as the service does.

    .venv/bin/python -m tests.bench.bench_change_points [--quick]

Each history is 60 pushes of one test's per-push median (100 ms). Noise: 5 % Gaussian
per push; "busy" adds, to one job in 30, a machine 1.5x slower for that job only. The
detector (services/diagnose/change_points.slower_steps, default thresholds) runs on
every prefix from 6 pushes on, as after each job; a flat history that gets a step at any
prefix is a false alarm. A planted step (1.2x, 1.5x, 2x from push 40) counts as found
when some prefix reports it, at the right push when the first report names push 40, and
the delay is the pushes after the step it took.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from services.diagnose.change_points import Step, slower_steps
from services.thresholds import Thresholds
from tests.bench.figures import Figure

PUSHES = 60
STEP_AT = 40
FIRST_PREFIX = 6
NOISES = {"5 %": 0.0, "5 % + busy jobs": 1 / 30}


def history(seed: int, noise_busy: float, factor: float = 1.0) -> list[float]:
    rng = random.Random(seed)
    values = []
    for i in range(PUSHES):
        value = 0.1 * (factor if i >= STEP_AT else 1.0) * (1 + rng.gauss(0, 0.05))
        if rng.random() < noise_busy:
            value *= 1.5
        values.append(value)
    return values


def first_report(
    series: list[float], thresholds: Thresholds, seen: dict[tuple[float, ...], list[Step]] | None = None
) -> tuple[int, int] | None:
    """(prefix length, step index) of the first prefix that reports a step, or None.

    ``seen``: the steps of the prefixes searched before, by their exact values. One seed's
    histories share their pushes before STEP_AT whatever the factor, and those before its
    first busy job whatever the noise (``history`` draws the same numbers for both), and
    slower_steps is a function of the series alone (Otava's t-test splits draw nothing):
    a prefix searched once gives the same steps again, so it is not searched again."""
    for end in range(FIRST_PREFIX, len(series) + 1):
        prefix = series[:end]
        if seen is None:
            steps = slower_steps(prefix, thresholds)
        else:
            key = tuple(prefix)
            if key not in seen:
                seen[key] = slower_steps(prefix, thresholds)
            steps = seen[key]
        if steps:
            return end, steps[0].index
    return None


def run(quick: bool = False) -> dict:
    thresholds = Thresholds()
    flat_n, step_n = (60, 30) if quick else (400, 100)
    figures: list[Figure] = []
    rows = []
    started = time.monotonic()
    seen: dict[tuple[float, ...], list[Step]] = {}  # prefixes already searched: first_report
    for name, busy in NOISES.items():
        alarms = sum(first_report(history(10_000 + s, busy), thresholds, seen) is not None for s in range(flat_n))
        figures.append(
            Figure(
                f"false slower_since per test, 60 pushes, {name}",
                100 * alarms / flat_n,
                "%",
                target="<= 1 %",
                met=alarms / flat_n <= 0.01,
                n=flat_n,
                note="searched after every push",
            )
        )
        rows.append({"noise": name, "false_alarms": alarms, "histories": flat_n})
        for factor in (1.2, 1.5, 2.0):
            reports = [first_report(history(s, busy, factor), thresholds, seen) for s in range(step_n)]
            found = [r for r in reports if r is not None]
            exact = sum(index == STEP_AT for _, index in found)
            delays = [end - STEP_AT for end, index in found if index == STEP_AT]
            figures.append(
                Figure(
                    f"{factor}x step found at its push, {name}",
                    100 * exact / step_n,
                    "%",
                    n=step_n,
                    note=(
                        f"found {len(found)}/{step_n}; median {statistics.median(delays):g} slow pushes to report"
                        if delays
                        else f"found {len(found)}/{step_n}"
                    ),
                )
            )
            rows.append(
                {
                    "noise": name,
                    "factor": factor,
                    "found": len(found),
                    "at_its_push": exact,
                    "histories": step_n,
                    "median_delay": statistics.median(delays) if delays else None,
                }
            )
    return {"figures": figures, "rows": rows, "seconds": time.monotonic() - started}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    result = run(parser.parse_args().quick)
    for figure in result["figures"]:
        print(f"{figure.name}: {figure.value:.1f} {figure.unit} (n={figure.n}) {figure.note}")
    print(json.dumps(result["rows"]))
    print(f"{result['seconds']:.0f} s")
