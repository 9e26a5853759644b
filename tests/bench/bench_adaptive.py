"""Adaptive repetitions: does stopping a configuration early, once more runs cannot change
its verdict, cost the verdict? Each example of examples/ is screened three times, back
to back, with `lagtrace run --repeat 10`: twice with every configuration held to 10 runs
(LAGTRACE_THRESHOLDS__MIN_REPETITIONS=10) and once as shipped (early stopping), the
adaptive screen between the fixed ones in turn. Figures: the runs the adaptive screen
needed over the fixed screens', how often it reaches the same findings (kind,
configuration, test) as a fixed screen, and how often the two fixed screens agree with
each other: the noise floor, since two screens of the same code on a shared machine
may differ without any stopping rule. Targets: half the runs or fewer, the same verdicts.
Quick mode: one example, --repeat 6 (the rule can stop one run early), no second fixed
screen: a smoke run.

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


def _screen(home, workdir, command: list[str], fixed: bool, repeat: int = REPEAT) -> dict:
    args = ["--executor", "local", "--repeat", str(repeat), "--evidence", "none"]
    for config in CONFIGS:
        args += ["--config", config]
    settings = {"LAGTRACE_THRESHOLDS__MIN_REPETITIONS": str(repeat)} if fixed else {}
    return lagtrace_run(home, args, command, workdir=workdir, **settings)


def run(quick: bool = False) -> dict:
    examples = EXAMPLES[:1] if quick else EXAMPLES
    trials = 1 if quick else 2
    repeat = 6 if quick else REPEAT
    pairs = []
    with scratch_dir("adaptive") as home:
        for trial in range(trials):
            for label, where, command in examples:
                # The adaptive screen first, second or last in turn: drift favours none. The
                # quick run has no second fixed screen (it is a smoke run, not a figure).
                order = [("fixed", True), ("fixed_again", True)][: 1 if quick else 2]
                order.insert((trial + len(pairs)) % (len(order) + 1), ("adaptive", False))
                reports = {name: _screen(home, REPO / where, command, fixed, repeat) for name, fixed in order}
                found = {name: verdicts(report) for name, report in reports.items()}
                pairs.append(
                    {
                        "example": label,
                        "order": [name for name, _ in order],
                        "fixed_runs": len(timing_walls(reports["fixed"])),
                        "adaptive_runs": len(timing_walls(reports["adaptive"])),
                        "verdicts": {name: sorted(map(list, v), key=str) for name, v in found.items()},
                        # Agreement of the adaptive screen with each fixed one, and of the fixed ones.
                        "agree": [
                            found["adaptive"] == found[name] for name in ("fixed", "fixed_again") if name in found
                        ],
                        "fixed_agree": found["fixed"] == found["fixed_again"] if "fixed_again" in found else None,
                        "differ": sorted(map(list, found["adaptive"] ^ found["fixed"]), key=str),
                        # A difference on a configuration that ran every repetition in the
                        # adaptive screen too is the machine's noise, not the stopping rule's.
                        "stopped_early": sorted(
                            label
                            for label in CONFIGS
                            if len(timing_walls(reports["adaptive"], label))
                            < len(timing_walls(reports["fixed"], label))
                        ),
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
    comparisons = [agree for p in pairs for agree in p["agree"]]
    agreed = 100 * sum(comparisons) / len(comparisons)
    floor = None if quick else 100 * sum(p["fixed_agree"] for p in pairs) / len(pairs)
    note = f"{len(examples)} example(s) x {trials} trial(s)"
    differences = [(p, verdict) for p in pairs for verdict in p["differ"]]
    early = sum(1 for p, (_, config, _) in differences if config in p["stopped_early"])
    return {
        "figures": [
            Figure(
                f"runs, adaptive / fixed {repeat}", value, "x", low, high, "<= 0.50", value <= 0.5, len(pairs), note
            ),
            Figure(
                "verdicts agree, adaptive vs fixed",
                agreed,
                "%",
                None,
                None,
                "100 %",
                agreed == 100,
                len(comparisons),
                (f"fixed vs fixed {floor:.0f} %; " if floor is not None else "")
                + f"{early} of {len(differences)} differences on a configuration the adaptive screen stopped early",
            ),
            *(
                [Figure("verdicts agree, fixed vs fixed (the noise floor)", floor, "%", n=len(pairs))]
                if floor is not None
                else []
            ),
        ],
        "pairs": pairs,
    }
