"""`lagtrace serve --processes N` (LAGTRACE_WEB_PROCESSES): N serving processes on one
socket, a dead one replaced, all of them stopped by one SIGTERM to the parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import requests

from tests.cli.test_submit import free_port
from tests.conftest import REPO, run_cli

BROKER = "redis://127.0.0.1:1/0"  # never reached: serving pages queues nothing


def _children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
    return found


def _wait(condition, what: str, log: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"{what}: {log.read_text()[-3000:]}"
        time.sleep(0.1)


def test_serve_runs_the_processes_asked_for_and_replaces_a_dead_one(sqlite_url, tmp_path):
    assert run_cli(["migrate"], sqlite_url).returncode == 0
    port = free_port()
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "serve", "--port", str(port)],
            cwd=REPO,
            env={
                **os.environ,
                "LAGTRACE_DATABASE_URL": sqlite_url,
                "LAGTRACE_BROKER_URL": BROKER,
                "LAGTRACE_WEB_PROCESSES": "2",
            },
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait(lambda: len(_children(server.pid)) == 2, "two serving processes", log_path)
            first = _children(server.pid)

            def answers() -> bool:
                try:
                    return requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
                except requests.RequestException:
                    return False

            _wait(answers, "an answer on the shared port", log_path)
            # A serving process that dies is replaced; the port keeps answering.
            dead = min(first)
            os.kill(dead, signal.SIGKILL)
            _wait(
                lambda: len(_children(server.pid)) == 2 and dead not in _children(server.pid),
                "a replacement",
                log_path,
            )
            assert all(answers() for _ in range(10))
            survivors = _children(server.pid)
        finally:
            server.terminate()
            server.wait(timeout=30)
    assert server.returncode == 0, log_path.read_text()[-3000:]
    # One SIGTERM to the parent (what Kubernetes sends) stopped every serving process.
    for pid in survivors:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    assert "with 2 processes" in log_path.read_text()
