"""Gate jobs on a real suite: what a push costs once its tests have history, beside a matrix job.

The synthetic suite of bench_suites (healthy tests of realistic durations, a planted
CPU-sensitive hand-off and a planted bimodal test) is screened by two matrix jobs (the
default branch's schedule), then by gate jobs on the unchanged suite
(services/jobs/gate.py), each with `lagtrace run` as a user runs it, against one
database: the first gates find too little history and send their tests on to every
configuration (their runs become history); once each test has enough (no test `new`),
a gate stops most tests at their one run; the planted tests, flagged by the previous
job, are checked once in each other configuration against their history there. Then a
pull request's head makes one test 2x slower, and five gate jobs judge it, each on a
copy of the history as it stood (independent trials). Each job's cost is its report's
``budget.cost_ratio`` (the wall time of its runs over the suite's own time), measured
side by side in one run.

    .venv/bin/python -m tests.bench.run --only gate_jobs [--quick]

Targets (docs/explanations/cost-model.md): the matrix at most 3x with both planted tests
found, a gate about the suite's own time once history holds (at most 1.5x), the 2x
regression `regressed` in at least 4 of 5 gates, and no healthy test `regressed` or
flagged medium or high. Not in the quick smoke run (its jobs take minutes); run
with ``--quick`` by hand it uses a suite of about 0.3 s, screened whole, and no drill.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

from tests.bench.bench_suites import BIMODAL, SENSITIVE, _pytest, build_suite
from tests.bench.common import scratch_dir
from tests.bench.figures import Figure

REPO = Path(__file__).resolve().parents[2]
MAX_GATES = 8  # history needs 9 runs a test; a gate adds its one run and its matrix runs
MATRIX_JOBS = 2  # the bimodal test must be found by the second at the latest
SLOWED_JOBS = 5  # independent gates of the slowed head: found in at least 4


def _job(folder: Path, database: Path, out: Path, kind: str, drill: bool) -> dict:
    env = {**os.environ, "LAGTRACE_DATABASE_URL": f"sqlite:///{database}"}
    args = ["run", "--executor", "local", "--workdir", str(folder), "--json", str(out), "--kind", kind]
    if not drill:
        args += ["--evidence", "none"]
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", *args, "--", *_pytest(folder)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"lagtrace run --kind {kind} failed: {done.stderr[-2000:]}")
    return json.loads(out.read_text())


def _spent(database: Path, job_id: int) -> str:
    """Where a job's seconds went: its runs' wall time per kind (the gate's own runs,
    the calibration loop, the matrix's, the drill's), summed over configurations."""
    with sqlite3.connect(database) as connection:
        rows = connection.execute(
            "SELECT r.kind, round(sum(r.wall_s), 1), count(*) FROM runs r JOIN job_configs c ON r.config_id = c.id "
            "WHERE c.job_id = ? GROUP BY r.kind ORDER BY sum(r.wall_s) DESC",
            (job_id,),
        ).fetchall()
    return ", ".join(f"{kind} {seconds} s in {count} runs" for kind, seconds, count in rows)


def _healthy_flagged(report: dict, slowed: str | None = None) -> list[str]:
    """Medium and high findings on the suite's healthy tests (``slowed``: the test a
    pull request made slower, whose findings are right)."""
    planted = ("::" + SENSITIVE, "::" + BIMODAL, *(["::" + slowed.rpartition("::")[2]] if slowed else []))
    return [
        f"{f['kind']} {f['test']}"
        for f in report["findings"]
        if f["test"] and not f["test"].endswith(planted) and f["severity"] in ("medium", "high")
    ]


def _copy_database(source: Path, target: Path) -> None:
    """A consistent copy of a SQLite database in WAL mode (services/db.py): the backup API
    reads the write-ahead log too, which a copy of the main file alone would miss
    (https://www.sqlite.org/backup.html)."""
    with closing(sqlite3.connect(source)) as reading, closing(sqlite3.connect(target)) as writing:
        reading.backup(writing)


def _planted_found(reports: list[dict]) -> tuple[bool, bool]:
    findings = [f for report in reports for f in report["findings"] if f["test"]]
    sensitive = any(f["test"].endswith("::" + SENSITIVE) and f["kind"] == "cpu_sensitivity" for f in findings)
    bimodal = any(f["test"].endswith("::" + BIMODAL) and f["kind"] == "latency_flaky" for f in findings)
    return sensitive, bimodal


def _slow_down(folder: Path, factor: float) -> str:
    """The suite's first test (CPU-bound, about 26 ms) made ``factor`` times slower: the
    head commit of a pull request. Returns its id."""
    part = folder / "test_part_000.py"
    text = part.read_text()
    head, _, rest = text.partition("def test_00000():\n    _compute(")
    value, _, tail = rest.partition(")")
    part.write_text(f"{head}def test_00000():\n    _compute({float(value) * factor:.4f}){tail}")
    return "test_part_000.py::test_00000"


def run(quick: bool = True, seconds: float | None = None) -> dict[str, object]:
    """``seconds``: another suite size (by hand: ``run(quick=False, seconds=60.0)``)."""
    drill = not quick
    seconds = seconds or (0.3 if quick else 10.0)
    with scratch_dir("gate_jobs") as scratch:
        folder = scratch / "suite"
        tests = build_suite(folder, seconds, round_trips=200 if quick else 1000)
        database = scratch / "lagtrace.db"
        matrices: list[dict] = []
        for number in range(MATRIX_JOBS):
            matrices.append(_job(folder, database, scratch / f"matrix{number}.json", "matrix", drill))
            print(
                f"matrix job {number + 1}: {matrices[-1]['budget']['cost_ratio']}x the suite "
                f"({_spent(database, matrices[-1]['job']['id'])})",
                file=sys.stderr,
                flush=True,
            )
        gates: list[dict] = []
        for number in range(MAX_GATES):
            gates.append(_job(folder, database, scratch / f"gate{number}.json", "gate", drill))
            verdicts = [test["verdict"] for test in gates[-1]["gate"]["tests"]]
            went_on = sum(test["went_on"] for test in gates[-1]["gate"]["tests"])
            print(
                f"gate {number + 1}: {went_on} of {tests} tests went on ({verdicts.count('new')} new), "
                f"{gates[-1]['budget']['cost_ratio']}x the suite ({_spent(database, gates[-1]['job']['id'])})",
                file=sys.stderr,
                flush=True,
            )
            if "new" not in verdicts:
                break  # every test has history enough: the gate's steady state
        # The pull request: one test 2x slower. Each of its gate jobs starts from a copy of
        # the history as it was (a pull request's runs are not its base branch's history),
        # so the jobs are independent trials of the same comparison.
        target = _slow_down(folder, 2.0)
        slowed: list[dict] = []
        for number in range(SLOWED_JOBS):
            trial = scratch / f"slowed{number}.db"
            _copy_database(database, trial)
            slowed.append(_job(folder, trial, scratch / f"slowed{number}.json", "gate", drill))
            [row] = [t for t in slowed[-1]["gate"]["tests"] if t["test"] == target]
            print(
                f"slowed gate {number + 1}: {target} {row['verdict']} (ratio {row['ratio']}, "
                f"{len(row['fresh_s'])} fresh runs against {row['stored']} stored), "
                f"{slowed[-1]['budget']['cost_ratio']}x the suite ({_spent(trial, slowed[-1]['job']['id'])})",
                file=sys.stderr,
                flush=True,
            )
    found = sum(_verdict(report, target) == "regressed" for report in slowed)
    wrongly = sorted(
        {t["test"] for report in slowed for t in report["gate"]["tests"] if t["verdict"] == "regressed"} - {target}
    )
    sensitive, bimodal = _planted_found(matrices)
    matrix_costs = [report["budget"]["cost_ratio"] for report in matrices]
    matrix_healthy = sorted({flag for report in matrices for flag in _healthy_flagged(report)})
    settled = gates[-1]
    gate_cost = settled["budget"]["cost_ratio"]
    healthy = sorted(
        {flag for report in gates for flag in _healthy_flagged(report)}
        | {flag for report in slowed for flag in _healthy_flagged(report, target)}
    )
    figures = [
        Figure(
            "matrix job / suite",
            max(matrix_costs),
            "x",
            target="<= 3x",
            met=max(matrix_costs) <= 3,
            note=f"the dearer of {MATRIX_JOBS} ({', '.join(f'{cost}x' for cost in matrix_costs)})",
        ),
        Figure(
            "planted tests found by the matrix jobs",
            100.0 * (sensitive + bimodal) / 2,
            "%",
            target="100 %",
            met=sensitive and bimodal,
            note=f"cpu_sensitivity on the hand-off: {sensitive}; latency_flaky on the bimodal test: {bimodal}",
        ),
        Figure(
            "medium/high findings on healthy tests, matrix jobs",
            len(matrix_healthy),
            "",
            target="0",
            met=not matrix_healthy,
            note="; ".join(matrix_healthy[:3]),
        ),
        Figure(
            "gate / suite, once history holds",
            gate_cost,
            "x",
            target="<= 1.5x",
            met=gate_cost is not None and gate_cost <= 1.5,
            note=f"gate {len(gates)} of the unchanged suite; gates 1-{len(gates) - 1} built history",
        ),
        Figure("gates until history holds", len(gates), "jobs", note="each gate's run and its matrix runs are history"),
        Figure(
            "planted 2x regression found by the gate",
            found,
            f"of {SLOWED_JOBS}",
            target=f">= {SLOWED_JOBS - 1} of {SLOWED_JOBS}",
            met=found >= SLOWED_JOBS - 1,
            note=f"{', '.join(str(report['budget']['cost_ratio']) + 'x' for report in slowed)} the suite",
        ),
        Figure(
            "healthy tests 'regressed' by the gate",
            len(wrongly),
            "",
            target="0",
            met=not wrongly,
            note="; ".join(wrongly[:3]),
        ),
        Figure(
            "medium/high findings on healthy tests, gates",
            len(healthy),
            "",
            target="0",
            met=not healthy,
            note="; ".join(healthy[:3]),
        ),
    ]
    return {
        "figures": figures,
        "tests": tests,
        "costs": [*matrix_costs, *(report["budget"]["cost_ratio"] for report in gates)],
        "slowed_costs": [report["budget"]["cost_ratio"] for report in slowed],
        "went_on": [sum(t["went_on"] for t in report["gate"]["tests"]) for report in gates],
    }


def _verdict(report: dict, test: str) -> str | None:
    return next((t["verdict"] for t in report["gate"]["tests"] if t["test"] == test), None)
