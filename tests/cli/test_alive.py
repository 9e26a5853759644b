"""`lagtrace alive`, the liveness probe of workers and beat: the heartbeat file's age."""

from __future__ import annotations

import os
import subprocess
import sys
import time


def alive(heartbeat, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "LAGTRACE_WORKER_HEARTBEAT_FILE": str(heartbeat)}
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "alive", *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_a_fresh_heartbeat_is_alive_a_stale_or_missing_one_is_not(tmp_path):
    heartbeat = tmp_path / "heartbeat"
    missing = alive(heartbeat)
    assert missing.returncode == 1 and "no heartbeat file" in missing.stderr
    heartbeat.touch()
    assert alive(heartbeat, "60").returncode == 0
    two_minutes_ago = time.time() - 120
    os.utime(heartbeat, (two_minutes_ago, two_minutes_ago))
    stale = alive(heartbeat, "60")
    assert stale.returncode == 1 and "limit 60 s" in stale.stderr
    assert alive(heartbeat, "300").returncode == 0
