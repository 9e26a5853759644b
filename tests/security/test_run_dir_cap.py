"""A run cannot fill the worker's disk through its run directory, the one host directory
it may write: past Settings.run_dir_max_bytes the run is stopped and the job fails saying
which setting raises the cap (services/measure/executors/scratch.py ScratchWatch)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from services.errors import ScratchExceeded
from services.measure.configs import CpuConfig
from services.measure.executors.base import RunRequest
from services.measure.executors.docker import DockerExecutor
from services.measure.executors.scratch import tree_usage
from services.settings import Settings
from tests.security.conftest import docker_ready

CAP = 32 * 1024**2
# Writes 1 MiB at a time to the run directory, up to 2 GiB, flushing each to the disk.
FILLER = """
import os
block = b"x" * (1 << 20)
with open("/lagtrace/run/fill", "wb") as out:
    for _ in range(2048):
        out.write(block)
        out.flush()
        os.fsync(out.fileno())
"""


def test_a_run_that_writes_past_the_cap_is_stopped_and_named(tmp_path):
    tmp_path.chmod(0o755)  # pytest makes it 0700; the container's uid 1000 must read it
    workdir, run_dir = tmp_path / "code", tmp_path / "run"
    workdir.mkdir()
    run_dir.mkdir()
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'x.db'}", run_dir_max_bytes=CAP)
    docker_ready(settings)
    executor = DockerExecutor(settings, cache_scope=f"test-{time.time_ns()}", job_id=0)
    request = RunRequest(["python3", "-c", FILLER], workdir, CpuConfig("all"), run_dir, 120, job_id=0)
    started = time.monotonic()
    with pytest.raises(ScratchExceeded, match="LAGTRACE_RUN_DIR_MAX_BYTES") as raised:
        executor.run(request)
    took = time.monotonic() - started
    held = tree_usage(run_dir).bytes
    print(f"\nstopped after {took:.1f} s holding {held / 1024**2:.0f} MiB (cap {CAP / 1024**2:.0f} MiB)")
    assert "over the cap of 33,554,432" in str(raised.value)
    # Stopped within a few ticks of passing the cap, far short of the 2 GiB it would write.
    assert CAP < held < 16 * CAP
    assert took < 60


def test_tree_usage_counts_what_is_allocated_and_follows_no_link(tmp_path: Path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "one").write_bytes(b"x" * 100_000)
    sparse = tmp_path / "sparse"
    with sparse.open("wb") as out:
        out.truncate(1024**3)  # a 1 GiB hole holds no block
    (tmp_path / "link").symlink_to("/usr")
    held = tree_usage(tmp_path)
    assert 100_000 <= held.bytes < 1024**2
    assert held.entries == 4  # a, a/one, sparse, link
