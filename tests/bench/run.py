"""`make bench`: every benchmark in one run, a table of figures with targets, and bench.json.

    .venv/bin/python -m tests.bench.run [--quick] [--only NAME ...] [--simulated only|none] [--json bench.json]

Each benchmark is a function ``run(quick: bool) -> dict`` registered below. Its dict
holds ``figures``: a list of tests.bench.figures.Figure (or dicts with the same keys),
and any other keys it likes (kept in bench.json). A benchmark whose dict has another
shape gets an adapter here. The exit status is 1 only when a benchmark is broken (it
raised, or a figure it promises is missing or not a number), never because a target
was missed: a slow machine is a finding, not a failure.

Hold the shared CPU lock around it on a machine where others work:
``flock /tmp/lagtrace-cpu.lock make bench``. The simulations (``simulated=True``) time
nothing: they replay the statistics on drawn durations, so their figures hold on a busy
machine too, and CI runs them beside its parallel tier (``--simulated only``), the rest
alone afterwards (``--simulated none``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import math
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.bench.figures import Figure

REPO = Path(__file__).resolve().parents[2]


def _from_false_positives(result: dict) -> list[Figure]:
    """The simulation of docs/explanations/statistics.md: worst false cpu_sensitivity rate and 80 % power per noise level."""
    worst = result["worst_false_per_test"]
    figures = [
        Figure(
            "false cpu_sensitivity per test (worst noise)",
            100 * worst,
            "%",
            target=f"<= {100 * result['target_false_per_test']:g} %",
            met=worst <= result["target_false_per_test"],
            n=result["jobs"] * result["tests_per_job"],
            note="simulated identical configurations",
        )
    ]
    for row in result["rows"]:
        smallest = row["smallest_slowdown_80"]
        figures.append(
            Figure(
                f"smallest slowdown found, 80 % power: {row['noise']}, repeat {row['repeat']}"
                + (f", futility stop after {row['futility']}" if row.get("futility") else ""),
                smallest if smallest is not None else math.inf,
                "x",
                note="> 10x" if smallest is None else "",
            )
        )
    return figures


def _generic(result: dict) -> list[Figure]:
    """A dict of plain numbers: each one a figure without a target."""
    return [
        Figure(key, float(value), "")
        for key, value in result.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    ]


def _from_stall(result: dict) -> list[Figure]:
    """tests/bench/bench_stall.py: per executor, snapshots that saw a GIL waiter, the
    delay from the deadline to the freeze and how long the process stayed frozen."""
    figures = []
    for name, r in result.items():
        seen = r["witnessed_gil_wait"] / r["runs"] if r["runs"] else None
        delay, frozen = r["freeze_delay_median_s"], r["frozen_median_s"]
        figures += [
            Figure(
                f"GIL wait seen, {name}",
                None if seen is None else 100 * seen,
                "%",
                target=">= 95 %",
                met=seen is not None and seen >= 0.95,
                n=r["runs"],
                note=(
                    f"deadline {r['stall_after_s']:.2f} s (default {r['default_stall_after_s']:.2f} s); "
                    f"slow median {r['slow_median_s']:.2f} s, fast {r['fast_median_s']:.2f} s"
                ),
            ),
            Figure(
                f"deadline to freeze, {name}",
                None if delay is None else delay * 1000,
                "ms",
                target="< 10 ms",
                met=delay is not None and delay < 0.010,
                n=r["snapshots"],
                note="median",
            ),
            Figure(
                f"frozen, {name}",
                None if frozen is None else frozen * 1000,
                "ms",
                target="< 500 ms",
                met=frozen is not None and frozen < 0.5,
                n=r["snapshots"],
                note=f"median, {r['rss_mb_median']} MB process",
            ),
        ]
    return figures


@dataclass(frozen=True)
class Benchmark:
    name: str
    target: str  # "module:function", imported when it runs
    expects: tuple[str, ...] = ()  # figure names that must be there (prefixes)
    adapt: Callable[[dict], list[Figure]] | None = None
    what: str = ""
    in_quick: bool = True  # part of `--quick` without --only (the smoke run CI makes)
    simulated: bool = False  # draws its durations, measures none: a busy machine changes no figure

    def load(self) -> Callable[..., dict]:
        module, _, function = self.target.partition(":")
        return getattr(importlib.import_module(module), function)


BENCHMARKS = [
    Benchmark(
        "fidelity_local",
        "tests.bench.bench_fidelity:local",
        ("lagtrace local / plain local",),
        what="lagtrace run --executor local vs the same command run plainly, pinned to core 0",
    ),
    Benchmark(
        "fidelity_docker",
        "tests.bench.bench_fidelity:docker",
        ("lagtrace docker / plain docker run",),
        what="lagtrace run --executor docker vs docker run with the same flags",
    ),
    Benchmark(
        "tracers",
        "tests.bench.bench_tracers:run",
        ("strace -c slowdown, syscall-heavy", "py-spy record slowdown, cpu-bound"),
        what="evidence runs vs timing runs of the same program",
    ),
    Benchmark(
        "stall",
        "tests.bench.bench_stall:run",
        ("GIL wait seen, local", "deadline to freeze, local", "frozen, local"),
        adapt=_from_stall,
        what="stall snapshot of a ~150 MB hand-off program mid-hand-off, per executor",
    ),
    Benchmark(
        "turnaround",
        "tests.bench.bench_turnaround:run",
        ("webhook to first container, median", "webhook to report stored, median"),
        what="two lagtrace workers, Redis, PostgreSQL, docker executor",
    ),
    Benchmark(
        "service",
        "tests.bench.bench_service:run",
        ("API p95", "inbox p95", "job page p95", "catalogue p95", "webhook throughput"),
        what="lagtrace serve on loopback over 10,000 jobs and 1,000,000 test results, 20 clients",
    ),
    Benchmark(
        "adaptive",
        "tests.bench.bench_adaptive:run",
        ("runs, adaptive / fixed", "verdicts agree, adaptive vs fixed"),
        what="examples/ with --repeat 10, early stopping vs fixed 10 per configuration, twice",
    ),
    Benchmark(
        "suites",
        "tests.bench.bench_suites:run",
        ("lagtrace / suite", "planted tests found", "medium/high findings on healthy tests"),
        what="a synthetic pytest suite with two planted tests, default matrix and drill, one worker",
    ),
    Benchmark(
        "pr_power",
        "tests.bench.bench_pr_power:run",
        ("smallest regression found, 80 % power", "false 'regressed' per unchanged test"),
        what="a pull request's base-against-head comparison, simulated with the real statistics",
        simulated=True,
    ),
    Benchmark(
        "gate",
        "tests.bench.bench_gate:run",
        ("false 'regressed' per unchanged test, sequential against history", "power at 2x", "gate runs per test"),
        what="a test's fresh runs judged sequentially against 20 stored runs, simulated suites of 500 tests",
        simulated=True,
    ),
    Benchmark(
        "gate_jobs",
        "tests.bench.bench_gate_jobs:run",
        ("matrix job / suite", "gate / suite, once history holds", "planted 2x regression found by the gate"),
        what="a synthetic suite screened by two matrix jobs, then gate jobs until history holds, then five gates of a 2x regression",
        in_quick=False,
    ),
    Benchmark(
        "bisect",
        "tests.bench.bench_bisect:run",
        (
            "culprit named, test_slow",
            "culprit named, test_handoff",
            "runs per job, test_slow",
            "runs per job, test_handoff",
            "range with no change",
            "runs recorded / runs taken",
        ),
        what="bisect jobs through the API and a worker on a 16-commit repository: a 2x slowdown at commit 6, "
        "a CPU-sensitive hand-off at commit 12, a test that never changes",
        in_quick=False,
    ),
    Benchmark(
        "false_positives",
        "tests.bench.bench_false_positives:run",
        ("false cpu_sensitivity per test",),
        adapt=_from_false_positives,
        what="cpu_sensitivity on simulated identical configurations",
        simulated=True,
    ),
    Benchmark(
        "change_points",
        "tests.bench.bench_change_points:run",
        ("false slower_since per test",),
        what="slower_since on simulated 60-push branch histories, searched after every push",
        simulated=True,
    ),
]


@dataclass
class Outcome:
    name: str
    seconds: float
    figures: list[Figure] = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    error: str | None = None


def _figures(benchmark: Benchmark, result: dict) -> list[Figure]:
    if benchmark.adapt is not None:
        return benchmark.adapt(result)
    raw = result.get("figures")
    if raw is None:
        return _generic(result)
    return [f if isinstance(f, Figure) else Figure(**f) for f in raw]


def _problems(benchmark: Benchmark, figures: list[Figure]) -> list[str]:
    problems = [
        f"missing figure {want!r}" for want in benchmark.expects if not any(f.name.startswith(want) for f in figures)
    ]
    if not figures:
        problems.append("no figures")
    for figure in figures:
        if figure.value is None or (isinstance(figure.value, float) and math.isnan(figure.value)):
            problems.append(f"figure {figure.name!r} has no value")
    return problems


def run_one(benchmark: Benchmark, quick: bool) -> Outcome:
    started = time.perf_counter()
    print(f"bench: {benchmark.name} ({benchmark.what}) ...", file=sys.stderr, flush=True)
    try:
        result = benchmark.load()(quick=quick)
        figures = _figures(benchmark, result)
        problems = _problems(benchmark, figures)
        extra = {k: v for k, v in result.items() if k != "figures"}
        error = "; ".join(problems) or None
    except Exception:
        figures, extra, error = [], {}, traceback.format_exc()
    seconds = time.perf_counter() - started
    print(f"bench: {benchmark.name} took {seconds:.0f} s{' (BROKEN)' if error else ''}", file=sys.stderr, flush=True)
    return Outcome(benchmark.name, seconds, figures, extra, error)


def _number(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "inf"
    digits = 3 if unit == "x" else (0 if unit in ("ms", "runs") else (2 if unit in ("s", "%", "/s") else 3))
    if unit == "ms" and abs(value) < 10:
        digits = 1
    return f"{value:.{digits}f}"


def table(outcomes: list[Outcome]) -> str:
    rows = [("benchmark", "figure", "value", "interval (95 %)", "target", "met", "n")]
    for outcome in outcomes:
        if outcome.error:
            rows.append((outcome.name, "BROKEN: " + outcome.error.strip().splitlines()[-1][:90], "", "", "", "", ""))
        for figure in outcome.figures:
            unit = figure.unit
            value = _number(figure.value, unit) + (f" {unit}" if unit else "")
            interval = "-" if figure.low is None else f"{_number(figure.low, unit)} .. {_number(figure.high, unit)}"
            met = {True: "yes", False: "NO", None: "-"}[figure.met]
            name = figure.name + (f" ({figure.note})" if figure.note else "")
            rows.append((outcome.name, name, value, interval, figure.target or "-", met, str(figure.n or "")))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines) + "\n"


def machine() -> dict:
    def first(command: list[str]) -> str | None:
        try:
            return subprocess.run(command, capture_output=True, text=True, timeout=20).stdout.strip() or None
        except (OSError, subprocess.TimeoutExpired):
            return None

    model = None
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "kernel": platform.release(),
        "docker": first(["docker", "version", "--format", "{{.Server.Version}}"]),
        "python": platform.python_version(),
        "load_average": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run, about 3 minutes here: few rounds, small data"
    )
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run these benchmarks only")
    parser.add_argument(
        "--simulated",
        choices=["only", "none"],
        help="only the simulations (which time nothing), or none of them",
    )
    parser.add_argument("--json", type=Path, default=REPO / "bench.json", help="where to write the figures")
    args = parser.parse_args(argv)
    chosen = [b for b in BENCHMARKS if (b.name in args.only if args.only else b.in_quick or not args.quick)]
    if args.only and len(chosen) != len(args.only):
        parser.error(f"known benchmarks: {', '.join(b.name for b in BENCHMARKS)}")
    if args.simulated:
        chosen = [b for b in chosen if b.simulated == (args.simulated == "only")]
    for left in (b for b in BENCHMARKS if args.quick and not args.only and not b.in_quick):
        print(f"bench: {left.name} is not part of the quick run (--only {left.name} runs it)", file=sys.stderr)
    started = time.perf_counter()
    host = machine()
    outcomes = [run_one(benchmark, args.quick) for benchmark in chosen]
    elapsed = time.perf_counter() - started
    print(
        f"\nlagtrace benchmarks ({'quick' if args.quick else 'full'}, {elapsed:.0f} s) on "
        f"{host['nproc']} x {host['cpu_model']}, kernel {host['kernel']}, Docker {host['docker']}"
    )
    print(table(outcomes), end="")
    broken = [o for o in outcomes if o.error]
    for outcome in broken:
        print(f"\n{outcome.name} is broken:\n{outcome.error}", file=sys.stderr)
    args.json.write_text(
        json.dumps(
            {
                "schema": "lagtrace.bench/v1",
                "quick": args.quick,
                "finished_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                "seconds": elapsed,
                "machine": host,
                "benchmarks": [
                    {
                        "name": o.name,
                        "seconds": o.seconds,
                        "error": o.error,
                        "figures": [f.as_dict() for f in o.figures],
                        "detail": o.extra,
                    }
                    for o in outcomes
                ],
            },
            indent=2,
            default=str,
        )
        + "\n"
    )
    print(f"bench: figures written to {args.json}", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
