"""The light queues (docs/guides/service.md#three-queues): the reconciler and check runs
each go to a queue of their own, served by a light worker and a check-run worker that
every `lagtrace worker` runs beside itself as child processes, started again when they
die and stopped with their parent; and the measurement worker sweeps the checkouts of
attempts that died."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import redis

from services.jobs.dispatch import NOTIFY, PREPARE, RECONCILE, SCREEN, Step
from services.settings import Settings
from tests.conftest import REPO
from worker import CeleryDispatcher, make_celery
from worker.app import CHECKS_QUEUE, LIGHT_QUEUE, QUEUE, task_name


def _broker(redis_url: str) -> str:
    return redis_url.rsplit("/", 1)[0] + "/12"


def test_check_runs_and_the_reconciler_each_go_to_a_queue_of_their_own(redis_url):
    broker = _broker(redis_url)
    client = redis.Redis.from_url(broker)
    client.flushdb()
    app = make_celery(Settings(broker_url=broker))
    try:
        dispatcher = CeleryDispatcher(app)
        for kind in (PREPARE, SCREEN, NOTIFY):
            dispatcher.send(Step(kind, 1, kind))
        # The Redis transport keeps each queue's messages in a list named after it.
        assert client.llen(QUEUE) == 2 and client.llen(CHECKS_QUEUE) == 1 and client.llen(LIGHT_QUEUE) == 0
        reconcile = app.conf.beat_schedule["reconcile"]
        assert reconcile["task"] == task_name(RECONCILE)
        # No expiry: a reconciler message is never dropped unrun.
        assert reconcile["options"] == {"queue": LIGHT_QUEUE}
    finally:
        client.flushdb()
        client.close()


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _light_child(parent: int, flag: bytes = b"--light-only") -> int | None:
    for pid in _children(parent):
        try:
            if flag in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except FileNotFoundError:
            continue
    return None


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"  # exited, not yet reaped by its (dead) parent's successor


def _wait_for(condition, timeout_s: float, what: str, log: Path):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if found := condition():
            return found
        time.sleep(0.1)
    raise AssertionError(f"{what} within {timeout_s} s:\n{log.read_text()[-3000:]}")


def _spawn(tmp_path: Path, redis_url: str) -> subprocess.Popen:
    env = {
        **os.environ,
        "LAGTRACE_DATABASE_URL": f"sqlite:///{tmp_path / 'lagtrace.db'}",
        "LAGTRACE_BROKER_URL": _broker(redis_url),
        "LAGTRACE_WORK_DIR": str(tmp_path / "work"),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "cli.main", "worker", "--loglevel=INFO"],
        cwd=REPO,
        env=env,
        stdout=(tmp_path / "worker.log").open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def test_the_light_worker_is_restarted_when_it_dies_and_stops_with_its_parent(tmp_path, redis_url):
    log = tmp_path / "worker.log"
    process = _spawn(tmp_path, redis_url)
    try:
        first = _wait_for(lambda: _light_child(process.pid), 60, "no light worker", log)
        _wait_for(lambda: f"light-{process.pid}@" in log.read_text(), 60, "the light worker did not start", log)
        os.kill(first, signal.SIGKILL)  # the OOM killer's choice, say
        second = _wait_for(
            lambda: (child := _light_child(process.pid)) not in (None, first) and child, 30, "no new light worker", log
        )
        # SIGTERM to the worker alone, as tini (the image's PID 1) sends it: both stop.
        os.kill(process.pid, signal.SIGTERM)
        assert process.wait(timeout=60) == 0, log.read_text()[-3000:]
        _wait_for(lambda: _gone(second), 30, "the light worker outlived its parent", log)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_a_light_worker_whose_parent_was_killed_stops(tmp_path, redis_url):
    log = tmp_path / "worker.log"
    process = _spawn(tmp_path, redis_url)
    try:
        child = _wait_for(lambda: _light_child(process.pid), 60, "no light worker", log)
        _wait_for(lambda: f"light-{process.pid}@" in log.read_text(), 60, "the light worker did not start", log)
        process.kill()  # kill -9 of the worker alone: nothing stops its children for it
        process.wait()
        _wait_for(lambda: _gone(child), 30, "the orphaned light worker kept running", log)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # the pool children it left


def test_check_runs_are_served_beside_a_busy_light_pool_and_dead_checkouts_are_swept(tmp_path, redis_url):
    broker = _broker(redis_url)
    client = redis.Redis.from_url(broker)
    client.flushdb()
    # A checkout left by an attempt of an earlier worker process that was killed.
    dead = tmp_path / "work" / "jobs" / "4-screen-1-0123456789abcdef"
    (dead / "pkg").mkdir(parents=True)
    (dead / "pkg" / "big.bin").write_bytes(b"x" * 4096)
    log = tmp_path / "worker.log"
    process = _spawn(tmp_path, redis_url)
    try:
        _wait_for(lambda: not dead.exists(), 60, "the dead checkout was not swept at start", log)
        checks = _wait_for(lambda: _light_child(process.pid, b"--checks-only"), 60, "no check-run worker", log)
        _wait_for(lambda: f"checks-{process.pid}@" in log.read_text(), 60, "the check-run worker did not start", log)
        _wait_for(lambda: f"light-{process.pid}@" in log.read_text(), 60, "the light worker did not start", log)
        # A check-run message goes to the check-run queue, which only that worker serves.
        app = make_celery(Settings(broker_url=broker))
        CeleryDispatcher(app).send(Step(NOTIFY, 424242, NOTIFY))
        _wait_for(lambda: client.llen(CHECKS_QUEUE) == 0, 30, "the check-run message was not taken", log)
        _wait_for(lambda: "lagtrace.notify" in log.read_text(), 30, "the check-run worker did not run it", log)
        assert "4-screen-1-0123456789abcdef" in log.read_text()  # the sweep says what it removed
        os.kill(process.pid, signal.SIGTERM)
        assert process.wait(timeout=60) == 0, log.read_text()[-3000:]
        _wait_for(lambda: _gone(checks), 30, "the check-run worker outlived its parent", log)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        client.flushdb()
        client.close()
