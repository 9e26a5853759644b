"""Checkouts of attempts whose process died (SIGKILL, the OOM killer, a restarted
container) are removed by the sweep, and only those: a live attempt's checkout, held by
its process, is never touched, not even while it is being made."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

from services.jobs import sources
from services.models import JobSource
from services.settings import Settings
from tests.conftest import REPO


def archive() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as packed:
        info = tarfile.TarInfo("pkg/test_x.py")
        data = b"def test_x():\n    pass\n"
        info.size = len(data)
        packed.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def settings_for(tmp_path: Path) -> Settings:
    return Settings(database_url="sqlite://", work_dir=tmp_path / "work")


# A worker's attempt in a process of its own: it checks the code out, says where, and waits.
ATTEMPT = """
import sys, time
from services.jobs import sources
from services.models import JobSource
from services.settings import Settings
settings = Settings(database_url="sqlite://", work_dir=sys.argv[1])
directory, _ = sources.checkout(JobSource(job_id=9, kind="archive", archive=sys.stdin.buffer.read()), settings, "screen-1")
print(directory, flush=True)
time.sleep(600)
"""


def start_attempt(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    process = subprocess.Popen(
        [sys.executable, "-c", ATTEMPT, str(tmp_path / "work")],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(archive())
    process.stdin.close()
    line = process.stdout.readline().decode().strip()
    assert line, "the attempt made no checkout"
    return process, Path(line)


def test_the_checkout_of_a_killed_attempt_is_swept_and_live_ones_are_kept(tmp_path):
    settings = settings_for(tmp_path)
    killed, dead = start_attempt(tmp_path)
    alive, elsewhere = start_attempt(tmp_path)  # another process's live attempt
    ours, _ = sources.checkout(JobSource(job_id=9, kind="archive", archive=archive()), settings, "finish-1")
    git_home = dead.parent / f".git-home-{dead.name}"  # git's scratch home, left by the kill too
    git_home.mkdir()
    try:
        # While its process lives, nobody's checkout is swept.
        assert sources.sweep_checkouts(settings) == []
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        assert (dead / "pkg" / "test_x.py").exists()  # nothing removed it for the dead attempt
        assert sorted(sources.sweep_checkouts(settings)) == sorted([dead.name, git_home.name])
        assert not dead.exists() and not git_home.exists()
        assert (elsewhere / "pkg" / "test_x.py").exists() and (ours / "pkg" / "test_x.py").exists()
    finally:
        alive.kill()
        alive.wait()
    # Its process gone too, the other attempt's checkout goes at the next sweep; ours stays
    # until we remove it.
    assert sources.sweep_checkouts(settings) == [elsewhere.name]
    assert ours.exists()
    assert sources.remove(ours) and not ours.exists()
    assert sources.sweep_checkouts(settings) == []


def test_a_checkout_being_made_is_never_swept_from_under_it(tmp_path):
    settings = settings_for(tmp_path)
    settings.work_dir.mkdir()
    stop = threading.Event()
    swept: list[str] = []

    def sweep() -> None:
        while not stop.is_set():
            swept.extend(sources.sweep_checkouts(settings))

    sweeper = threading.Thread(target=sweep)
    sweeper.start()
    made = []
    try:
        for i in range(40):
            directory = sources.new_checkout_directory(settings, f"1-prepare-{i}")
            assert directory.is_dir(), directory  # held from the moment it is returned
            made.append(directory)
    finally:
        stop.set()
        sweeper.join()
    assert all(directory.is_dir() for directory in made)
    assert not set(swept) & {directory.name for directory in made}
    for directory in made:
        sources.remove(directory)
