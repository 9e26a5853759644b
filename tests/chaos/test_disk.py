"""The worker's disk fills up (services/jobs/disk.py): a real file system of 64 MiB (a
tmpfs mounted as the work directory) filled with a real file. While it is short of
space the worker takes no step and is not ready; a step that fails meanwhile is given
back, not counted; once there is room again the job ends done."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.jobs.disk import free_bytes
from tests.chaos.conftest import BOUND_S, QUICK_YML, START_UP_S, chaos_stack, record
from tests.conftest import REPO, require

MIN_FREE = 16 * 1024 * 1024


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    require(os.geteuid() == 0 and shutil.which("mount") is not None, "mounting a small tmpfs needs root")
    work = tmp_path / "stack" / "work"
    work.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0755", "lagtrace-full-disk", str(work)], check=True)
    try:
        yield work
    finally:
        subprocess.run(["umount", "--lazy", str(work)], check=False)


def fill(work: Path, leave: int) -> Path:
    """A file that leaves ``leave`` bytes free on the work directory's file system."""
    filler = work / "filler"
    with filler.open("wb") as handle:
        handle.truncate(0)
        os.posix_fallocate(handle.fileno(), 0, max(0, free_bytes(work) - leave))
    return filler


def alive_ready(work: Path, tmp_path: Path, **extra: str) -> subprocess.CompletedProcess:
    beat = tmp_path / "heartbeat"
    beat.touch()
    env = {
        **os.environ,
        "LAGTRACE_WORKER_HEARTBEAT_FILE": str(beat),
        "LAGTRACE_WORK_DIR": str(work),
        "LAGTRACE_MIN_FREE_DISK_BYTES": str(MIN_FREE),
        **extra,
    }
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "alive", "60", "--ready"], cwd=REPO, env=env, capture_output=True, text=True
    )


def test_a_full_work_directory_takes_no_step_until_it_has_room(
    private_postgres, private_redis, engine_client, small_disk, tmp_path, repository_with
):
    with chaos_stack(
        private_postgres, private_redis, tmp_path / "stack", LAGTRACE_MIN_FREE_DISK_BYTES=str(MIN_FREE)
    ) as stack:
        filler = fill(small_disk, leave=MIN_FREE // 4)
        job_id = stack.push(repository_with(QUICK_YML))
        # Short of space: the step is not taken (and not failed), however often it is sent.
        deadline = time.monotonic() + BOUND_S + START_UP_S
        logs = ""
        while "not taken: the work directory" not in logs:
            assert time.monotonic() < deadline, stack.logs()
            time.sleep(0.5)
            logs = "".join(log.read_text() for log in stack.base.glob("worker*.log"))
        assert "LAGTRACE_MIN_FREE_DISK_BYTES" in logs
        time.sleep(BOUND_S)  # one more round of the reconciler, still short
        assert stack.status(job_id) == "queued", stack.ledger(job_id)
        assert all(tries == 0 for _, _, tries, _ in stack.ledger(job_id)), stack.ledger(job_id)
        refused = alive_ready(small_disk, tmp_path)
        assert refused.returncode == 1 and "not ready: the work directory" in refused.stderr, refused
        # Room again: the reconciler's next round sends the step, and the job is done.
        filler.unlink()
        freed = time.monotonic()
        assert alive_ready(small_disk, tmp_path).returncode == 0
        status, _ = stack.wait_final(job_id, BOUND_S + START_UP_S + 120)
        record("work directory full, then room again", "job final", time.monotonic() - freed)
        assert status == "done", f"{stack.ledger(job_id)}\n{stack.logs()}"
        attempts = {name: tries for name, _, tries, _ in stack.ledger(job_id)}
        assert attempts["prepare"] == 1 and attempts["screen"] == 1, attempts


def test_a_step_that_fails_while_the_disk_is_full_is_given_back_uncounted(small_disk, tmp_path, migrated_sqlite):
    from services.db import make_engine, make_session_factory
    from services.jobs.lease import run_step
    from tests.services.jobs.test_lease import queued_step, settings_for, task_of

    shutil.copy(migrated_sqlite, tmp_path / "lagtrace.db")
    settings = settings_for(tmp_path, min_free_disk_bytes=MIN_FREE)
    settings = settings.model_copy(update={"work_dir": small_disk})
    engine = make_engine(settings)
    session_factory = make_session_factory(engine)
    job_id, step = queued_step(session_factory, settings)

    def checkout_fills_the_disk(session, settings, task):
        fill(small_disk, leave=0)
        with (small_disk / "checkout").open("wb") as handle:
            handle.write(b"x" * 1024 * 1024)  # ENOSPC, as git's or the run's own write would get

    try:
        run_step(session_factory, settings, step, {"prepare": checkout_fills_the_disk})
        task, job = task_of(session_factory, job_id)
        # Not failed and not counted: the disk's fault, not the job's.
        assert task.attempts == 0 and task.state.value == "pending", (task.attempts, task.state)
        assert job.status.value == "queued" and job.error is None, (job.status, job.error)
    finally:
        engine.dispose()


def test_a_work_directory_out_of_inodes_is_not_ready_while_its_bytes_show_room(tmp_path):
    """Many small files run a file system out of entries long before its bytes: the gate
    watches both (a tmpfs of 64 MiB and 3,000 inodes, filled with empty files)."""
    require(os.geteuid() == 0 and shutil.which("mount") is not None, "mounting a small tmpfs needs root")
    work = tmp_path / "inodes"
    work.mkdir()
    options = "size=64m,nr_inodes=3000,mode=0755"
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "lagtrace-no-inodes", str(work)], check=True)
    try:
        files = work / "files"
        files.mkdir()
        made = 0
        with contextlib.suppress(OSError):  # ENOSPC: no entry left
            while True:
                (files / str(made)).touch()
                made += 1
        assert free_bytes(work) > MIN_FREE, free_bytes(work)  # the bytes show room
        refused = alive_ready(work, tmp_path, LAGTRACE_MIN_FREE_DISK_INODES="100")
        assert refused.returncode == 1 and "free inodes" in refused.stderr, refused
        assert "LAGTRACE_MIN_FREE_DISK_INODES" in refused.stderr, refused
        shutil.rmtree(files)
        assert alive_ready(work, tmp_path, LAGTRACE_MIN_FREE_DISK_INODES="100").returncode == 0, made
    finally:
        subprocess.run(["umount", "--lazy", str(work)], check=False)
