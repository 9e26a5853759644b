"""Does lagtrace change the time it measures? Its measured time against the same command
run plainly, side by side.

- local: `lagtrace run --executor local --config cpuset=0` against the command started
  by a plain process pinned to core 0 and timed around fork/exec and wait;
- docker: `lagtrace run --executor docker --config cpuset=0` against `docker run` with
  the same flags (image, user, read-only root, tmpfs, no network, capabilities, limits,
  cpuset), the command timed inside the container around fork/exec and wait, as
  lagtrace's in-container timer does (container start-up is not test time on either side).

The workload is pure Python arithmetic pinned to one core (~0.3 s), whose own spread is
printed beside the ratio; rounds alternate which side goes first so drift on a shared
machine spreads over both. Target: the ratio of medians within 5 %.

    .venv/bin/python -m tests.bench.run --only fidelity_local fidelity_docker [--quick]
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from services.measure.executors.docker_guards import RUNNER_USER
from services.settings import Settings
from tests.bench.common import BenchError, lagtrace_run, scratch_dir, timing_walls, write_programs
from tests.bench.figures import Figure, bootstrap, ratio_figure, spread_figure

TARGET = 0.05
COMMAND = ["python3", "cpu_bound.py"]

# The plain side's timer in the container: fork/exec and wait, like lagtrace's own.
CONTAINER_TIMER = (
    "import subprocess, sys, time\n"
    "started = time.perf_counter()\n"
    "code = subprocess.call(sys.argv[1:])\n"
    "print(time.perf_counter() - started)\n"
    "sys.exit(code)\n"
)


def _plain_local(workdir: Path) -> float:
    python = shutil.which(COMMAND[0])
    if python is None:
        raise BenchError("python3 is not on PATH")
    started = time.perf_counter()
    done = subprocess.run(
        [python, *COMMAND[1:]],
        cwd=workdir,
        preexec_fn=lambda: os.sched_setaffinity(0, {0}),
        stdout=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise BenchError(f"plain run exited {done.returncode}")
    return wall


def _plain_docker(settings: Settings, workdir: Path) -> float:
    argv = [
        "docker",
        "run",
        "--rm",
        "--network",
        "none",
        "--read-only",
        "--tmpfs",
        f"/tmp:rw,exec,nosuid,nodev,size={settings.docker_tmpfs_size}",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--user",
        RUNNER_USER,
        "--memory",
        settings.docker_memory,
        "--memory-swap",
        settings.docker_memory,
        "--pids-limit",
        str(settings.docker_pids_limit),
        "--cpuset-cpus",
        "0",
        "-e",
        "HOME=/tmp",
        "-e",
        "PYTHONDONTWRITEBYTECODE=1",
        "-v",
        f"{workdir}:{workdir}:ro",
        "-w",
        str(workdir),
        settings.docker_image,
        "/usr/bin/python3",
        "-I",
        "-S",
        "-c",
        CONTAINER_TIMER,
        *COMMAND,
    ]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise BenchError(f"docker run exited {done.returncode}: {done.stderr[-1000:]}")
    return float(done.stdout.strip().splitlines()[-1])


def _compare(executor: str, quick: bool, plain: Callable[[Path], float]) -> dict:
    rounds = 1 if quick else 12
    per_round = 3
    measured: list[float] = []
    baseline: list[float] = []
    round_ratios: list[float] = []
    neighbours: list[float] = []
    with scratch_dir(f"fidelity-{executor}") as home:
        workdir = home / "tree"
        workdir.mkdir()
        workdir.chmod(0o755)
        write_programs(workdir)
        args = ["--executor", executor, "--config", "cpuset=0", "--repeat", str(per_round), "--evidence", "none"]
        # Exactly per_round runs: early stopping would make the two sides' counts differ.
        fixed = {"LAGTRACE_THRESHOLDS__MIN_REPETITIONS": str(per_round)}

        def lagtrace_side() -> list[float]:
            report = lagtrace_run(home, args, COMMAND, workdir=workdir, **fixed)
            walls = timing_walls(report)
            if not walls:
                raise BenchError(f"lagtrace {executor} produced no successful timing run")
            neighbours.extend(
                run["foreign_cpus"] for run in report["configs"][0]["runs"] if run.get("foreign_cpus") is not None
            )
            return walls

        def plain_side() -> list[float]:
            return [plain(workdir) for _ in range(per_round)]

        plain(workdir)  # warm the page cache and the image's layers for both sides
        for number in range(rounds):
            if number % 2 == 0:
                ours, theirs = lagtrace_side(), plain_side()
            else:
                theirs, ours = plain_side(), lagtrace_side()
            measured.extend(ours)
            baseline.extend(theirs)
            # Paired by round: whatever else the machine did then weighed on both sides.
            round_ratios.append(statistics.median(ours) / statistics.median(theirs))
    label = "lagtrace local / plain local" if executor == "local" else "lagtrace docker / plain docker run"
    value = statistics.median(round_ratios)
    low, high = bootstrap(statistics.median, round_ratios)
    return {
        "figures": [
            Figure(
                label,
                value,
                "x",
                low,
                high,
                f"{1 - TARGET:.2f}-{1 + TARGET:.2f}",
                abs(value - 1) <= TARGET,
                len(round_ratios),
                note=f"median of {rounds} paired rounds, {per_round}+{per_round} runs each, cpuset=0",
            ),
            ratio_figure(f"pooled, {executor}", measured, baseline, within=TARGET, note="all runs, ratio of medians"),
            spread_figure(f"workload spread, plain {executor}", baseline, note="IQR / median"),
            # Where the executor records it: how busy the rest of the machine was meanwhile.
            *(
                [
                    Figure(
                        f"other CPU use during lagtrace's {executor} runs",
                        statistics.median(neighbours),
                        "CPUs",
                        n=len(neighbours),
                        note="median; 0 = a quiet machine",
                    )
                ]
                if neighbours
                else []
            ),
        ],
        "lagtrace_s": measured,
        "plain_s": baseline,
        "round_ratios": round_ratios,
        "foreign_cpus": neighbours,
    }


def local(quick: bool = False) -> dict:
    return _compare("local", quick, _plain_local)


def docker(quick: bool = False) -> dict:
    settings = Settings()
    return _compare("docker", quick, lambda workdir: _plain_docker(settings, workdir))
