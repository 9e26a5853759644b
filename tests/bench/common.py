"""What the benchmarks share: lagtrace driven through its CLI (the public entry point, so
the benchmarks outlive the engine's internals), scratch databases, and workloads whose
own spread is far below the effects they are used to measure."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import create_engine, text

REPO = Path(__file__).resolve().parents[2]
LAGTRACE = [sys.executable, "-m", "cli.main"]

# Pure Python arithmetic pinned to one core: no I/O, no threads, no allocation churn, so
# run-to-run spread is the machine's (about 1 % on a quiet core), not the workload's.
CPU_BOUND = """\
import sys
total = 0
for i in range(int(sys.argv[1]) if len(sys.argv) > 1 else 2_500_000):
    total += i * i
"""

# Small syscalls back to back: what a tracer stops on most.
SYSCALL_HEAVY = """\
import os, sys
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 60_000):
    os.stat("/")
"""


class BenchError(RuntimeError):
    """A benchmark could not produce its figures (as opposed to producing bad ones)."""


@contextlib.contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=f"lagtrace-bench-{prefix}-"))
    path.chmod(0o755)  # the docker executor's uid 1000 reads the mounted tree
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def write_programs(directory: Path) -> None:
    (directory / "cpu_bound.py").write_text(CPU_BOUND)
    (directory / "syscall_heavy.py").write_text(SYSCALL_HEAVY)
    for program in directory.glob("*.py"):
        program.chmod(0o644)


def lagtrace_env(home: Path, **settings: str) -> dict[str, str]:
    """A private SQLite database and artifact store, so a benchmark never writes into the
    user's own history."""
    return {
        **os.environ,
        "LAGTRACE_DATABASE_URL": f"sqlite:///{home / 'lagtrace.db'}",
        "LAGTRACE_ARTIFACT_DIR": str(home / "artifacts"),
        "LAGTRACE_WORK_DIR": str(home / "work"),
        **settings,
    }


def lagtrace_run(home: Path, args: list[str], command: list[str], *, workdir: Path, **settings: str) -> dict:
    """`lagtrace run ARGS --json ... -- COMMAND`; returns the lagtrace.report/v1 dict."""
    report = home / f"report-{uuid.uuid4().hex[:8]}.json"
    done = subprocess.run(
        [*LAGTRACE, "run", *args, "--workdir", str(workdir), "--json", str(report), "--", *command],
        cwd=REPO,
        env=lagtrace_env(home, **settings),
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0 or not report.exists():
        raise BenchError(f"lagtrace run {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")
    data = json.loads(report.read_text())
    report.unlink()
    return data


def timing_walls(report: dict, label: str | None = None) -> list[float]:
    """The wall times of a report's successful timing runs (one configuration, or all)."""
    return [
        run["wall_s"]
        for config in report["configs"]
        if label is None or config["label"] == label
        for run in config["runs"]
        if run["exit_code"] == 0 and not run["timed_out"]
    ]


def server_url() -> str:
    url = os.environ.get("LAGTRACE_TEST_POSTGRES_URL")
    if not url:
        raise BenchError("LAGTRACE_TEST_POSTGRES_URL is not set (run .ci/provision.sh, source .state/test.env)")
    return url


def redis_server_url() -> str:
    url = os.environ.get("LAGTRACE_TEST_REDIS_URL")
    if not url:
        raise BenchError("LAGTRACE_TEST_REDIS_URL is not set (run .ci/provision.sh, source .state/test.env)")
    return url


@contextlib.contextmanager
def scratch_database(prefix: str) -> Iterator[str]:
    """A fresh PostgreSQL database on the test server; dropped afterwards."""
    server = server_url()
    name = f"lagtrace_bench_{prefix}_{uuid.uuid4().hex[:8]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield f"{server.rsplit('/', 1)[0]}/{name}"
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
