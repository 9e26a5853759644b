"""What a run writes beside its JUnit report goes when the run has been read: a step that
kept every run's directory until it ended let a job fill the disk with runs each under
the per-run cap (services/measure/screen.py). The job's own test looks for its
neighbours: each run must find its directory alone."""

from __future__ import annotations

import sys

from tests.conftest import run_cli

SUITE = """\
import os
import sys
from pathlib import Path

LOG = {log!r}


def test_writes_beside_its_report():
    junit = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--junitxml="))
    run_dir = Path(junit).parent
    (run_dir / "ballast.bin").write_bytes(os.urandom(1 << 20))  # what a hostile run leaves
    with open(LOG, "a") as log:
        log.write(f"{{len([p for p in run_dir.parent.iterdir() if p.is_dir()])}}\\n")
"""


def test_each_runs_directory_is_gone_before_the_next_run(sqlite_url, tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    log = tmp_path / "neighbours.log"
    (suite / "test_scratch.py").write_text(SUITE.format(log=str(log)))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_scratch.py"]
    args = ["run", "--executor", "local", "--config", "cpuset=0", "--config", "cpuset=0-1", "--repeat", "3"]
    args += ["--evidence", "none", "--workdir", str(suite), "--", *command]
    result = run_cli(args, sqlite_url)
    assert result.returncode == 0, result.stderr
    counts = [int(line) for line in log.read_text().split()]
    # Two warm-ups and three timing runs a configuration at least, each alone in the scratch.
    assert len(counts) >= 8, counts
    assert set(counts) == {1}, counts
