"""The liveness heartbeat: a real `lagtrace worker` and `lagtrace beat` touch their file
while they run, and a stopped worker leaves none behind (so a probe never sees a dead
worker as alive). The worker keeps its row in the database fresh too, idle or busy."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import create_engine, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from services.db import make_engine
from services.jobs import workers
from services.models import Worker
from services.settings import Settings
from tests.conftest import REPO
from worker.app import HEARTBEAT_INTERVAL_S


def _spawn(args: list[str], tmp_path: Path, redis_url: str, heartbeat: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "LAGTRACE_DATABASE_URL": f"sqlite:///{tmp_path / 'lagtrace.db'}",
        "LAGTRACE_BROKER_URL": redis_url.rsplit("/", 1)[0] + "/14",
        "LAGTRACE_WORK_DIR": str(tmp_path / "work"),
        "LAGTRACE_WORKER_HEARTBEAT_FILE": str(heartbeat),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "cli.main", *args],
        cwd=REPO,
        env=env,
        stdout=(tmp_path / "process.log").open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _wait_for(condition, timeout_s: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} within {timeout_s} s:\n{log.read_text()[-3000:]}")


def _alive(heartbeat: Path, max_age: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "LAGTRACE_WORKER_HEARTBEAT_FILE": str(heartbeat)}
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "alive", str(max_age)], env=env, capture_output=True, text=True, cwd=REPO
    )


def _beats(process: subprocess.Popen, heartbeat: Path, log: Path) -> None:
    _wait_for(heartbeat.exists, 60, "no heartbeat file", log)
    first = heartbeat.stat().st_mtime
    # Pushed back in time: only a fresh touch by the process can bring it forward again.
    os.utime(heartbeat, (first - 600, first - 600))
    assert _alive(heartbeat, 60).returncode == 1
    _wait_for(lambda: heartbeat.stat().st_mtime >= first, 3 * HEARTBEAT_INTERVAL_S, "the heartbeat stopped", log)
    assert _alive(heartbeat, 60).returncode == 0
    assert process.poll() is None


def test_a_worker_touches_its_heartbeat_and_removes_it_when_stopped(tmp_path, redis_url):
    heartbeat = tmp_path / "work" / "heartbeat"
    process = _spawn(["worker", "--loglevel=INFO"], tmp_path, redis_url, heartbeat)
    try:
        _beats(process, heartbeat, tmp_path / "process.log")
        os.killpg(process.pid, signal.SIGTERM)  # what the kubelet sends: a warm shutdown
        assert process.wait(timeout=30) == 0
        assert not heartbeat.exists()
        missing = _alive(heartbeat, 60)
        assert missing.returncode == 1 and "no heartbeat file" in missing.stderr
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_beat_alone_touches_its_heartbeat(tmp_path, redis_url):
    heartbeat = tmp_path / "work" / "beat-heartbeat"
    process = _spawn(["beat", "--loglevel=INFO"], tmp_path, redis_url, heartbeat)
    try:
        _beats(process, heartbeat, tmp_path / "process.log")
        # The schedule lives in memory: nothing on disk to corrupt or to need a writable root.
        assert not any(p.name.startswith("celerybeat-schedule") for p in (tmp_path / "work").iterdir())
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _worker_rows(database: Path) -> list[tuple[str, str]]:
    engine = create_engine(f"sqlite:///{database}")
    try:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(select(Worker.name, Worker.cpus))]
    except OperationalError:
        return []  # not migrated yet: the worker is still starting
    finally:
        engine.dispose()


def test_a_worker_keeps_its_row_fresh_idle_and_removes_it_when_stopped(tmp_path, redis_url):
    # Idle (no job at all): the service still knows it is alive, from the database.
    heartbeat = tmp_path / "work" / "heartbeat"
    database, log = tmp_path / "lagtrace.db", tmp_path / "process.log"
    process = _spawn(["worker", "--loglevel=INFO"], tmp_path, redis_url, heartbeat)
    try:
        mine = f"{socket.gethostname()}/{process.pid}"
        _wait_for(lambda: [name for name, _ in _worker_rows(database)] == [mine], 60, "no row of its own", log)
        settings = Settings(database_url=f"sqlite:///{database}", broker_url=redis_url)
        with Session(make_engine(settings)) as session:
            [alive] = workers.live(session, settings)
            assert alive.name == mine and alive.cpus and alive.concurrency == 1
        os.killpg(process.pid, signal.SIGTERM)  # a warm shutdown: gone at once, not after a lapse
        assert process.wait(timeout=30) == 0
        assert _worker_rows(database) == []
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
