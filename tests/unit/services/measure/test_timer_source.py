"""The program the docker executor hands the container's interpreter (``python3 -I -S -c``)
runs where lagtrace is not installed: the timer imports the stall clock, which the program
carries along (services/measure/executors/docker.py timer_source)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

from services.measure.executors.docker import timer_source


def run_timer(source: str, directory: Path, *command: str) -> subprocess.CompletedProcess[str]:
    # -I: no PYTHONPATH, no current directory on sys.path, as in the container.
    argv = [sys.executable, "-I", "-S", "-c", source, str(directory / "output.log"), "10", "0", "none", "--"]
    return subprocess.run([*argv, *command], capture_output=True, text=True, cwd=directory, timeout=60)


def test_the_shipped_timer_measures_a_command_without_lagtrace_installed(tmp_path: Path) -> None:
    done = run_timer(timer_source(), tmp_path, "sh", "-c", "echo measured; exit 3")
    assert done.returncode == 0, done.stderr
    pid_line, result_line = done.stdout.splitlines()
    assert pid_line.startswith("pid ") and pid_line[4:].isdigit()
    result = json.loads(result_line)
    assert result["exit_code"] == 3
    assert 0 < result["wall_s"] < 10
    assert (tmp_path / "output.log").read_text() == "measured\n"


def test_the_timer_alone_cannot_find_the_stall_clock(tmp_path: Path) -> None:
    # What the program carries the stall clock for: the timer's own source fails there.
    alone = resources.files("services.measure.executors").joinpath("container_timer.py").read_text()
    done = run_timer(alone, tmp_path, "true")
    assert done.returncode != 0
    assert "ModuleNotFoundError" in done.stderr
