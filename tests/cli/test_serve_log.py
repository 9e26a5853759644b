"""`lagtrace serve`'s log names where jobs go without the broker's password."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tests.cli.test_submit import free_port
from tests.conftest import REPO, run_cli

BROKER = "redis://lagtrace:hunter2-broker-pw@127.0.0.1:1/0"  # never reached: serve only names it


def test_the_serve_log_masks_the_brokers_credentials(sqlite_url, tmp_path):
    assert run_cli(["migrate"], sqlite_url).returncode == 0
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "serve", "--port", str(free_port())],
            cwd=REPO,
            env={**os.environ, "LAGTRACE_DATABASE_URL": sqlite_url, "LAGTRACE_BROKER_URL": BROKER},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 60
            while "Celery workers at" not in log_path.read_text() and process.poll() is None:
                assert time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.1)
        finally:
            process.terminate()
            process.wait(timeout=30)
    text = log_path.read_text()
    assert "jobs go to the Celery workers at redis://***@127.0.0.1:1/0" in text, text
    assert "hunter2-broker-pw" not in text, text
