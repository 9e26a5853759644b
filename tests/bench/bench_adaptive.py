"""Adaptive repetitions: does stopping a configuration early, once more runs cannot change
its verdict, cost the verdict? Each example of examples/ is screened twice, back to back,
with `lagtrace run --repeat 10`: once as shipped (early stopping) and once with every
configuration held to 10 runs (LAGTRACE_THRESHOLDS__MIN_REPETITIONS=10). Figures: the
runs the adaptive screen needed over the fixed screen's, and how often both reach the
same findings (kind, configuration, test). Targets: half the runs or fewer, the same
verdicts every time.

    .venv/bin/python -m tests.bench.run --only adaptive [--quick]
"""

from __future__ import annotations

import random

from tests.bench.common import REPO, lagtrace_run, scratch_dir, timing_walls
from tests.bench.figures import BOOTSTRAP_RESAMPLES, CONFIDENCE, Figure, percentile

REPEAT = 10
CONFIGS = ["cpuset=0", "cpuset=0-1"]
# (label, working directory under the repo, command): one CPU-sensitive program, one
# healthy one, and a pytest suite with one sensitive test among healthy ones.
EXAMPLES = [
    ("steady.py", "examples", ["python3", "steady.py"]),
    ("handoff.py", "examples", ["python3", "handoff.py"]),
    ("pytest_suite", "examples/pytest_suite", ["python3", "-m", "pytest", "-q", "test_latency.py"]),
]


def verdicts(report: dict) -> set[tuple]:
    return {(f["kind"], f["config"], f["test"]) for f in report["findings"]}


def _screen(home, workdir, command: list[str], fixed: bool) -> dict:
    args = ["--executor", "local", "--repeat", str(REPEAT), "--evidence", "none"]
    for config in CONFIGS:
        args += ["--config", config]
    settings = {"LAGTRACE_THRESHOLDS__MIN_REPETITIONS": str(REPEAT)} if fixed else {}
    return lagtrace_run(home, args, command, workdir=workdir, **settings)


def run(quick: bool = False) -> dict:
    examples = EXAMPLES[:1] if quick else EXAMPLES
    trials = 1 if quick else 2
    pairs = []
    with scratch_dir("adaptive") as home:
        for trial in range(trials):
            for label, where, command in examples:
                # Alternate which screen goes first, so drift favours neither.
                order = (True, False) if trial % 2 == 0 else (False, True)
                reports = {fixed: _screen(home, REPO / where, command, fixed) for fixed in order}
                pairs.append(
                    {
                        "example": label,
                        "fixed_runs": len(timing_walls(reports[True])),
                        "adaptive_runs": len(timing_walls(reports[False])),
                        "fixed_verdicts": sorted(map(list, verdicts(reports[True])), key=str),
                        "adaptive_verdicts": sorted(map(list, verdicts(reports[False])), key=str),
                        "agree": verdicts(reports[True]) == verdicts(reports[False]),
                    }
                )

    def share(sample: list[dict]) -> float:
        return sum(p["adaptive_runs"] for p in sample) / sum(p["fixed_runs"] for p in sample)

    value = share(pairs)
    low = high = None
    if len(pairs) >= 3:
        rng = random.Random(16)
        estimates = [share(rng.choices(pairs, k=len(pairs))) for _ in range(BOOTSTRAP_RESAMPLES)]
        low, high = percentile(estimates, 50 * (1 - CONFIDENCE)), percentile(estimates, 100 - 50 * (1 - CONFIDENCE))
    agreed = sum(p["agree"] for p in pairs)
    note = f"{len(examples)} example(s) x {trials} trial(s)"
    return {
        "figures": [
            Figure("runs, adaptive / fixed 10", value, "x", low, high, "<= 0.50", value <= 0.5, len(pairs), note),
            Figure(
                "verdicts agree", 100 * agreed / len(pairs), "%", None, None, "100 %", agreed == len(pairs), len(pairs)
            ),
        ],
        "pairs": pairs,
    }
