"""Gate jobs on a real suite: what a push costs once its tests have history, beside a matrix job.

The synthetic suite of bench_suites (healthy tests of realistic durations, a planted
CPU-sensitive hand-off and a planted bimodal test) is screened by one matrix job, then by
gate jobs on the unchanged suite (services/jobs/gate.py), each with `lagtrace run` as a
user runs it, against one database: the first gates find too little history and send
their tests on to every configuration (their runs become history); once each test has
enough (no test `new`), a gate stops most tests at their one run; the tests with a
finding in the previous job (the planted ones) go on every time. Then one test is made 10x slower and a
last gate runs. Each job's cost is its report's ``budget.cost_ratio`` (the wall time of
its runs over the suite's own time), measured side by side in one run.

    .venv/bin/python -m tests.bench.run --only gate_jobs [--quick]

Target (issue of the gate, docs/explanations/cost-model.md): a gate about the suite's own
time once history holds (at most 1.5x), the planted regression found, and no medium or
high finding on a healthy test. Not in the quick smoke run (its jobs take minutes); run
with ``--quick`` by hand it uses a suite of about 0.3 s, screened whole, and no drill.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.bench.bench_suites import BIMODAL, SENSITIVE, _pytest, build_suite
from tests.bench.common import scratch_dir
from tests.bench.figures import Figure

REPO = Path(__file__).resolve().parents[2]
MAX_GATES = 8  # history needs 9 runs a test; a gate adds its one run and its matrix runs


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


def _healthy_flagged(report: dict) -> list[str]:
    return [
        f"{f['kind']} {f['test']}"
        for f in report["findings"]
        if f["test"]
        and not f["test"].endswith(("::" + SENSITIVE, "::" + BIMODAL, "::test_00001"))
        and f["severity"] in ("medium", "high")
    ]


def run(quick: bool = True, seconds: float | None = None) -> dict[str, object]:
    """``seconds``: another suite size (by hand: ``run(quick=False, seconds=1.0)``)."""
    drill = not quick
    seconds = seconds or (0.3 if quick else 10.0)
    with scratch_dir("gate_jobs") as scratch:
        folder = scratch / "suite"
        tests = build_suite(folder, seconds, round_trips=200 if quick else 1000)
        database = scratch / "lagtrace.db"
        matrix = _job(folder, database, scratch / "matrix.json", "matrix", drill)
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
        # test_00001 (a wait) made 10x slower: the next gate must find it.
        target = "test_part_000.py::test_00001"
        part = folder / "test_part_000.py"
        text = part.read_text()
        head, _, rest = text.partition("def test_00001():\n    _wait(")
        value, _, tail = rest.partition(")")
        part.write_text(f"{head}def test_00001():\n    _wait({float(value) * 10:.4f}){tail}")
        slowed = _job(folder, database, scratch / "slowed.json", "gate", drill)
        print(
            f"slowed gate: {slowed['budget']['cost_ratio']}x the suite ({_spent(database, slowed['job']['id'])})",
            file=sys.stderr,
        )
        print(
            f"matrix job: {matrix['budget']['cost_ratio']}x the suite ({_spent(database, matrix['job']['id'])})",
            file=sys.stderr,
        )
    verdicts = {test["test"]: test["verdict"] for test in slowed["gate"]["tests"]}
    print(
        f"slowed gate: {target} {[t for t in slowed['gate']['tests'] if t['test'] == target]}",
        file=sys.stderr,
        flush=True,
    )
    settled = gates[-1]
    matrix_cost = matrix["budget"]["cost_ratio"]
    gate_cost = settled["budget"]["cost_ratio"]
    healthy = sorted({flag for report in [*gates, slowed] for flag in _healthy_flagged(report)})
    figures = [
        Figure("matrix job / suite", matrix_cost, "x", note="the default matrix, survey and focus"),
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
            "planted 10x regression found by the gate",
            100.0 if verdicts.get(target) == "regressed" else 0.0,
            "%",
            target="100 %",
            met=verdicts.get(target) == "regressed",
            note=f"{slowed['budget']['cost_ratio']}x the suite",
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
        "costs": [matrix_cost, *(report["budget"]["cost_ratio"] for report in gates), slowed["budget"]["cost_ratio"]],
        "went_on": [sum(t["went_on"] for t in report["gate"]["tests"]) for report in gates],
    }
