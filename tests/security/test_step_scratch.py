"""A job cannot fill the worker's disk with runs each under the run directory's cap: what
a step's runs write is summed, in bytes and in entries, and a run that takes the sum past
the step's cap is stopped and fails the job, counted, naming the cap and its setting
(services/measure/executors/scratch.py). Its scratch is gone when the job ends. A step
that fails on a short disk is given back uncounted only when its own runs held little
(services/jobs/disk.py own_doing).

Small caps here (MiB, hundreds of entries), set through the settings; the same code holds
the defaults (4 GiB and 5,000 entries a run, 32 GiB and 100,000 a step)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from services.db import make_engine, make_session_factory
from services.errors import ScratchExceeded
from services.jobs import disk
from services.jobs.lease import run_step
from services.measure.configs import CpuConfig
from services.measure.executors.base import RunRequest
from services.measure.executors.docker import DockerExecutor
from services.measure.executors.local import LocalExecutor
from services.measure.executors.scratch import ScratchAccount, Usage, stepping, tree_usage
from services.models import JobConfig, JobTask, Run
from services.settings import Settings
from tests.conftest import require
from tests.security.conftest import docker_ready
from tests.service_support import make_repository

MiB = 1024**2
# Inside the container, the command's stdout is output.log in its run directory.
RUN_DIR = "import os; run_dir = os.path.dirname(os.readlink('/proc/self/fd/1'))"
# `fallocate -l 3900K` in the run's directory: blocks held, as the review's 3.9 GB runs.
FALLOCATE = RUN_DIR + (
    "\nwith open(os.path.join(run_dir, 'ballast'), 'wb') as f:\n    os.posix_fallocate(f.fileno(), 0, 3_900_000)\n"
)
EMPTY_FILES = RUN_DIR + "\nfor i in range({n}):\n    open(os.path.join(run_dir, str(i)), 'w').close()\n"


@pytest.fixture
def scratch_root(tmp_path, monkeypatch) -> Path:
    """Where the step's runs make their directories (TMPDIR, as the chart sets it)."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def screen_task(service, job_id: int) -> JobTask:
    with service.session_factory() as session:
        task = session.scalar(select(JobTask).where(JobTask.job_id == job_id, JobTask.name == "screen"))
        session.expunge_all()
        return task


def runs_of(service, job_id: int) -> int:
    with service.session_factory() as session:
        return session.scalar(select(func.count()).select_from(Run).join(JobConfig).where(JobConfig.job_id == job_id))


def test_runs_each_under_the_run_cap_fail_their_step_together_counted_and_named(make_service, scratch_root, tmp_path):
    # 18 runs of 3.9 MB (3 configurations, a warm-up and 5 runs each), each under the run's
    # 4 MiB, 70 MB together.
    service = make_service(run_dir_max_bytes=4 * MiB, step_scratch_max_bytes=32 * MiB)
    url, _ = make_repository(tmp_path / "repo", None)
    configs = ["cpuset=0", "cpuset=1", "cpuset=0-1"]
    body = {"command": ["python3", "-c", FALLOCATE], "configs": configs, "repeat": 5, "evidence": []}
    started = time.monotonic()
    response = service.submit({"repository": {"url": url}, **body})
    assert response.status_code == 201, response.get_json()
    job_id = response.get_json()["id"]
    job = service.wait(job_id)
    took = time.monotonic() - started
    left = tree_usage(scratch_root)
    print(f"\nfailed after {took:.1f} s and {runs_of(service, job_id)} stored runs: {job['error']}")
    assert job["status"] == "failed", job
    assert "LAGTRACE_STEP_SCRATCH_MAX_BYTES raises it" in job["error"], job["error"]
    assert "over the step's cap of 33,554,432" in job["error"], job["error"]
    # The ninth run takes 9 x 3.9 MB past 32 MiB: stopped there, the eight before it stored.
    assert "(9 runs, " in job["error"], job["error"]
    assert runs_of(service, job_id) == 8
    # Counted: the screen failed on its one attempt, not given back to start again.
    task = screen_task(service, job_id)
    assert task.attempts == 1 and task.state.value == "failed", (task.attempts, task.state)
    # Nothing of the step is left on the worker's disk: no run directory, no checkout.
    assert left == Usage(), list(scratch_root.rglob("*"))
    checkouts = service.settings.work_dir / "jobs"
    assert not checkouts.exists() or not any(checkouts.iterdir()), list(checkouts.iterdir())


def test_ten_thousand_empty_files_in_a_run_are_refused_by_the_default_entries_cap(make_service, scratch_root, tmp_path):
    service = make_service()
    assert service.settings.run_dir_max_entries < 10_000
    url, _ = make_repository(tmp_path / "repo", None)
    code = EMPTY_FILES.format(n=10_000)
    body = {"command": ["python3", "-c", code], "configs": ["cpuset=0"], "repeat": 3, "evidence": []}
    response = service.submit({"repository": {"url": url}, **body})
    job = service.wait(response.get_json()["id"])
    print(f"\n{job['error']}")
    assert job["status"] == "failed", job
    assert "LAGTRACE_RUN_DIR_MAX_ENTRIES raises it" in job["error"], job["error"]
    assert "entries (files and directories)" in job["error"], job["error"]
    task = screen_task(service, job["id"])
    assert task.attempts == 1 and task.state.value == "failed", (task.attempts, task.state)
    assert tree_usage(scratch_root) == Usage(), list(scratch_root.rglob("*"))


def test_a_run_making_files_as_fast_as_it_can_is_stopped_by_the_entries_cap(tmp_path):
    tmp_path.chmod(0o755)  # pytest makes it 0700; the container's uid 1000 must read it
    workdir, run_dir = tmp_path / "code", tmp_path / "run"
    workdir.mkdir()
    run_dir.mkdir()
    cap = 200
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'x.db'}", run_dir_max_entries=cap)
    docker_ready(settings)
    statvfs = os.statvfs(run_dir)
    require(statvfs.f_files > 0, "the entries cap watches free inodes: this file system counts none")
    executor = DockerExecutor(settings, cache_scope=f"test-{time.time_ns()}", job_id=0)
    code = EMPTY_FILES.format(n=1_000_000)
    request = RunRequest(["python3", "-c", code], workdir, CpuConfig("all"), run_dir, 120, job_id=0)
    started = time.monotonic()
    with pytest.raises(ScratchExceeded, match="LAGTRACE_RUN_DIR_MAX_ENTRIES") as raised:
        executor.run(request)
    took = time.monotonic() - started
    made = tree_usage(run_dir).entries
    print(f"\nstopped after {took:.1f} s with {made:,} entries (cap {cap}): {raised.value}")
    assert f"over the cap of {cap}" in str(raised.value)
    # Stopped within a few ticks, far short of the million it would make.
    assert cap < made < 200_000
    assert took < 60


# Makes N empty files in the run directory given as its first argument (local executor).
MAKE_FILES = (
    "import sys, os\nfor i in range(int(sys.argv[2])):\n    open(os.path.join(sys.argv[1], str(i)), 'w').close()\n"
)


def test_a_steps_runs_count_in_one_account_whichever_executor_runs_them(tmp_path):
    """A pull request's step runs the head's and the base's executor: one account."""
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'x.db'}", run_dir_max_entries=200, step_scratch_max_entries=500
    )
    head, base = LocalExecutor(settings), LocalExecutor(settings)
    ran = 0
    with (
        stepping(ScratchAccount(settings)) as account,
        pytest.raises(ScratchExceeded, match="LAGTRACE_STEP_SCRATCH_MAX_ENTRIES") as raised,
    ):
        for n in range(10):
            run_dir = tmp_path / f"run{n}"
            run_dir.mkdir()
            command = [sys.executable, "-c", MAKE_FILES, str(run_dir), "150"]
            try:
                (head if n % 2 == 0 else base).run(RunRequest(command, tmp_path, CpuConfig("all"), run_dir, 60))
            finally:
                ran += 1
                shutil.rmtree(run_dir)
    # 151 entries a run (150 files, output.log): three runs hold 453, the fourth's cap is 47.
    assert ran == 4, raised.value
    assert account.written.entries > 500 and account.runs == 4
    assert "over the step's cap of 500" in str(raised.value) and "(4 runs, " in str(raised.value)
    # Outside a step each executor keeps its own: nothing of this step went there.
    assert head.scratch.runs == 0 and base.scratch.runs == 0


# --- a step failing on a short disk: given back only when its own scratch is small --------

MIN_FREE = 16 * MiB
# Writes N MiB into the run directory given as its first argument (local executor).
WRITE_MIB = (
    "import os, sys\nwith open(os.path.join(sys.argv[1], 'ballast'), 'wb') as f:\n"
    "    os.posix_fallocate(f.fileno(), 0, int(sys.argv[2]) << 20)\n"
)


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    """A real file system of 64 MiB as the work directory (a tmpfs: mounting needs root)."""
    require(os.geteuid() == 0 and shutil.which("mount") is not None, "mounting a small tmpfs needs root")
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0755", "lagtrace-step-disk", str(work)], check=True)
    try:
        yield work
    finally:
        subprocess.run(["umount", "--lazy", str(work)], check=False)


@pytest.mark.parametrize(("own_mib", "counted"), [(50, True), (1, False)])
def test_a_step_that_fails_on_a_short_disk_counts_where_its_own_runs_held_the_room(
    small_disk, tmp_path, migrated_sqlite, monkeypatch, own_mib, counted
):
    from tests.chaos.test_disk import fill
    from tests.services.jobs.test_lease import queued_step, settings_for, task_of

    shutil.copy(migrated_sqlite, tmp_path / "lagtrace.db")
    settings = settings_for(tmp_path, min_free_disk_bytes=MIN_FREE, run_dir_max_bytes=64 * MiB)
    settings = settings.model_copy(update={"work_dir": small_disk})
    engine = make_engine(settings)
    session_factory = make_session_factory(engine)
    job_id, step = queued_step(session_factory, settings)
    (small_disk / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(small_disk / "tmp"))  # TMPDIR in it, as the chart's

    def runs_then_a_full_disk(session, settings, task):
        # One run that writes own_mib to its directory, gone once read (as the screen's)...
        run_dir = Path(tempfile.mkdtemp())
        command = [sys.executable, "-c", WRITE_MIB, str(run_dir), str(own_mib)]
        try:
            LocalExecutor(settings).run(RunRequest(command, small_disk, CpuConfig("all"), run_dir, 60))
        finally:
            shutil.rmtree(run_dir)
        # ...then another writer takes the disk, and the step's next write meets ENOSPC.
        fill(small_disk, leave=MIN_FREE // 4)
        (small_disk / "checkout").write_bytes(b"x" * 8 * MiB)

    try:
        if counted:
            with pytest.raises(OSError):  # recorded on the job, then raised for the worker's log
                run_step(session_factory, settings, step, {"prepare": runs_then_a_full_disk})
        else:
            run_step(session_factory, settings, step, {"prepare": runs_then_a_full_disk})
        task, job = task_of(session_factory, job_id)
        print(f"\n{own_mib} MiB of its own on a 64 MiB disk: attempts {task.attempts}, {job.status.value}: {job.error}")
        if counted:
            # 50 MiB: as much as the room it was taken with (64 MiB less the 16 MiB kept free).
            assert task.attempts == 1 and job.status.value == "failed", (task.attempts, job.status)
            assert "its own runs held 50.0 MiB in one run directory" in (job.error or ""), job.error
            assert "LAGTRACE_MIN_FREE_DISK_BYTES" in (job.error or ""), job.error
        else:
            # 1 MiB of its own: the disk's fault, given back uncounted (tests/chaos/test_disk.py).
            assert task.attempts == 0 and task.state.value == "pending", (task.attempts, task.state)
            assert job.status.value == "queued" and job.error is None, (job.status, job.error)
    finally:
        engine.dispose()


def test_own_doing_weighs_what_its_runs_held_against_the_room_it_was_taken_with(tmp_path, monkeypatch):
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'x.db'}",
        work_dir=tmp_path / "work",
        min_free_disk_bytes=512 * MiB,
        min_free_disk_inodes=10_000,
    )
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the run directories beside it

    def held(room: tuple[int, int | None], most: Usage) -> str | None:
        account = ScratchAccount(settings, room)
        account.most_held = most
        return disk.own_doing(settings, account)

    # Taken with 60 GiB free: a 3.9 GB run directory did not fill it, others did.
    assert held((60 * 1024 * MiB, 4_000_000), Usage(3_900 * 10**6, 10)) is None
    # Taken with 4 GiB free: the same run held all the room above the 512 MiB kept free.
    assert "its own runs held 3.6 GiB" in (held((4 * 1024 * MiB, 4_000_000), Usage(3_900 * 10**6, 10)) or "")
    # Never less than the threshold: a step of a few MiB on a disk that was nearly short is no culprit.
    assert held((520 * MiB, 4_000_000), Usage(5 * MiB, 10)) is None
    # Inodes alike (a file system that counts them), and not where it counts none.
    assert "as many as the room" in (held((10 * 1024 * MiB, 30_000), Usage(MiB, 20_000)) or "")
    assert held((10 * 1024 * MiB, None), Usage(MiB, 20_000)) is None
    # Run directories on another file system (a tmpfs /tmp) filled nothing of the work directory's.
    monkeypatch.setattr(tempfile, "tempdir", "/proc")
    assert held((4 * 1024 * MiB, 4_000_000), Usage(3_900 * 10**6, 10)) is None
