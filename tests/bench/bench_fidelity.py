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
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from services.measure.executors.docker import RUNNER_USER
from services.settings import Settings
from tests.bench.common import BenchError, lagtrace_run, scratch_dir, timing_walls, write_programs
from tests.bench.figures import ratio_figure, spread_figure

TARGET = 0.05
COMMAND = ["python3", "cpu_bound.py"]
PER_ROUND = 5

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
        "--cap-add",
        "SYS_PTRACE",
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
    rounds = 2 if quick else 8
    measured: list[float] = []
    baseline: list[float] = []
    with scratch_dir(f"fidelity-{executor}") as home:
        workdir = home / "tree"
        workdir.mkdir()
        workdir.chmod(0o755)
        write_programs(workdir)
        args = ["--executor", executor, "--config", "cpuset=0", "--repeat", str(PER_ROUND), "--evidence", "none"]
        # Exactly PER_ROUND runs: early stopping would make the two sides' counts differ.
        fixed = {"LAGTRACE_THRESHOLDS__MIN_REPETITIONS": str(PER_ROUND)}

        def lagtrace_side() -> None:
            walls = timing_walls(lagtrace_run(home, args, COMMAND, workdir=workdir, **fixed))
            if not walls:
                raise BenchError(f"lagtrace {executor} produced no successful timing run")
            measured.extend(walls)

        def plain_side() -> None:
            baseline.extend(plain(workdir) for _ in range(PER_ROUND))

        plain(workdir)  # warm the page cache and the image's layers for both sides
        for number in range(rounds):
            first, second = (lagtrace_side, plain_side) if number % 2 == 0 else (plain_side, lagtrace_side)
            first()
            second()
    label = "lagtrace local / plain local" if executor == "local" else "lagtrace docker / plain docker run"
    return {
        "figures": [
            ratio_figure(label, measured, baseline, within=TARGET, note="median wall, cpuset=0"),
            spread_figure(f"workload spread, plain {executor}", baseline, note="IQR / median"),
        ],
        "lagtrace_s": measured,
        "plain_s": baseline,
    }


def local(quick: bool = False) -> dict:
    return _compare("local", quick, _plain_local)


def docker(quick: bool = False) -> dict:
    settings = Settings()
    return _compare("docker", quick, lambda workdir: _plain_docker(settings, workdir))
