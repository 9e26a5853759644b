"""How much each evidence probe slows the run it watches, so a report can say how far an
evidence run was distorted: `strace -f -c`, `py-spy record` and the stall snapshot
(py-spy dump, /proc io, gcore of a frozen process), on a syscall-heavy and a CPU-bound
program. Each round is one `lagtrace run --executor local --config cpuset=0` with those
probes named: its timing runs and its evidence runs of the same program, interleaved in
time; the figure is the evidence run's wall over the timing runs' median.

    .venv/bin/python -m tests.bench.run --only tracers [--quick]
"""

from __future__ import annotations

from collections import defaultdict

from tests.bench.common import BenchError, lagtrace_run, scratch_dir, timing_walls, write_programs
from tests.bench.figures import Figure, ratio_figure

PROGRAMS = {
    "syscall-heavy": ["python3", "syscall_heavy.py", "100000"],  # ~0.2 s of stat()
    "cpu-bound": ["python3", "cpu_bound.py"],  # ~0.3 s of arithmetic
}
PROBES = {"strace": "strace -c", "pyspy": "py-spy record", "core": "stall snapshot"}
TIMING_RUNS = 3
# Well inside both programs' run time, so the snapshot always fires.
STALL_AFTER_S = 0.1
EXTRA_ROUNDS = 3


def run(quick: bool = False) -> dict:
    rounds = 1 if quick else 5
    figures = []
    raw: dict[str, dict[str, list[float]]] = {}
    failed: dict[str, list[str]] = defaultdict(list)
    attempted = 0
    with scratch_dir("tracers") as home:
        workdir = home / "tree"
        workdir.mkdir()
        write_programs(workdir)
        for program, command in PROGRAMS.items():
            timing: list[float] = []
            traced: dict[str, list[float]] = defaultdict(list)
            # Up to EXTRA_ROUNDS more when a probe has no successful run yet: py-spy record
            # fails now and then ("No python processes found"), and its failures are counted.
            for done in range(rounds + EXTRA_ROUNDS):
                if done >= rounds and all(traced[probe] for probe in PROBES):
                    break
                report = lagtrace_run(
                    home,
                    [
                        "--executor",
                        "local",
                        "--config",
                        "cpuset=0",
                        "--repeat",
                        str(TIMING_RUNS),
                        "--evidence",
                        ",".join(PROBES),
                        "--stall-after",
                        str(STALL_AFTER_S),
                    ],
                    command,
                    workdir=workdir,
                    LAGTRACE_THRESHOLDS__MIN_REPETITIONS=str(TIMING_RUNS),
                )
                timing.extend(timing_walls(report))
                for evidence_run in report["evidence_runs"]:
                    if evidence_run["exit_code"] == 0 and not evidence_run["timed_out"]:
                        traced[evidence_run["probe"]].append(evidence_run["wall_s"])
                    else:
                        failed[evidence_run["probe"]].append(_reason(report, evidence_run["id"]))
                attempted += len(report["evidence_runs"])
            for probe, label in PROBES.items():
                if not traced[probe]:
                    raise BenchError(f"no successful {probe} evidence run of the {program} program")
                figures.append(
                    ratio_figure(f"{label} slowdown, {program}", traced[probe], timing, note="traced / untraced wall")
                )
            raw[program] = {"timing_s": timing, **traced}
    lost = sum(len(reasons) for reasons in failed.values())
    figures.append(
        Figure(
            "evidence runs that failed",
            100 * lost / attempted,
            "%",
            n=attempted,
            note=", ".join(f"{probe} {len(reasons)}" for probe, reasons in failed.items()) or "none",
        )
    )
    return {"figures": figures, "walls": raw, "failed": failed}


def _reason(report: dict, run_id: int) -> str:
    """Why an evidence run failed, as its evidence says."""
    for evidence in report.get("evidence", []):
        content = evidence.get("content") or {}
        if evidence.get("run") == run_id and content.get("reason"):
            return content["reason"]
    return "exit code or timeout"
