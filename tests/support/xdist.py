"""What each pytest-xdist worker of `make test`'s parallel tier owns alone.

The parallel tier (`pytest -n N -m "not nightly and not latency"`) runs N worker
processes side by side. Most of what tests share is already per test (a PostgreSQL
database named by a uuid, pytest's tmp_path, ports the kernel hands out, containers
named and labelled by a uuid or an installation id). Two things are shared by name and
are given to each worker here:

- Redis: tests and their Celery workers pick database numbers (0-15) of the one test
  Redis; two workers' stacks on the same number would take each other's tasks. Each
  worker starts a Redis server of its own (as the chaos suite does, tests/chaos/conftest.py)
  and points LAGTRACE_TEST_REDIS_URL at it, so its subprocesses and containers (host
  network) reach the same one.
- lagtrace's data directory (XDG_DATA_HOME): code run with default Settings keeps its
  SQLite file, work directory and node lock there (services/settings.py _data_dir,
  services/measure/nodelock.py). Shared, one worker's measurement would wait for
  another's at the node lock, and default database URLs would give two workers the same
  container installation id, whose reaper removes the other's containers.

A serial run (no PYTEST_XDIST_WORKER) keeps the provisioned Redis and the user's data
directory, as before.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

# gw0, gw1, ... in an xdist worker; None in a serial run.
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
# The provisioned Redis (.state/test.env), read before a worker points the variable at a
# server of its own: what the docs' commands name (tests/e2e/test_quickstart.py).
PROVISIONED_REDIS_URL = os.environ.get("LAGTRACE_TEST_REDIS_URL")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _answers(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2) as connection:
        connection.sendall(b"PING\r\n")
        return connection.recv(16).startswith(b"+PONG")
    return False


@contextlib.contextmanager
def own_redis(directory: Path) -> Iterator[str]:
    """A Redis server of this worker's, without persistence, as the provisioned one
    (.ci/redis.sh); yields its URL (database 0) and stops it afterwards."""
    program = shutil.which("redis-server")
    if program is None:
        raise RuntimeError("redis-server is not installed (.ci/provision.sh installs it)")
    for _ in range(5):  # a port taken between the probe and the server's bind: another port
        port = _free_port()
        with (directory / "redis.log").open("a") as log:
            process = subprocess.Popen(
                [program, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"],
                cwd=directory,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 20
        while process.poll() is None and time.monotonic() < deadline and not _answers(port):
            time.sleep(0.05)
        if process.poll() is None and _answers(port):
            break
        process.kill()
        process.wait()
    else:
        raise RuntimeError(f"the worker's Redis did not start: {(directory / 'redis.log').read_text()[-2000:]}")
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
