"""The executor as an ordinary user in the docker group (how docs/guides/security.md says to run the
worker): it works, and a job's links to root-only files lead nowhere."""

from __future__ import annotations

import grp
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from services.settings import Settings
from tests.conftest import REPO, require
from tests.security.conftest import docker_ready

NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"  # this repository's venv interpreter may sit below /root (0700)

PLANT = (
    "import os, sys; out = os.readlink('/proc/self/fd/1'); os.unlink(out); "
    "os.symlink('/root/.lagtrace-root-only', out); sys.exit(5)"
)


@pytest.fixture
def scratch():
    directory = Path(tempfile.mkdtemp(prefix="lagtrace-nonroot-", dir="/tmp"))
    os.chown(directory, NOBODY, NOBODY)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def test_lagtrace_runs_jobs_in_docker_as_an_ordinary_user(scratch, tmp_path):
    docker_ready(Settings(database_url=f"sqlite:///{tmp_path / 'x.db'}"))
    require(os.geteuid() == 0, "switching to an ordinary user needs root")
    same_minor = subprocess.run([SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True)
    require(
        same_minor.stdout.decode().strip() == str(sys.version_info[:2]),
        "the system python3 must match the venv's to import its packages",
    )
    secret = Path("/root/.lagtrace-root-only")
    secret.write_text("ROOT-CANARY-0c55\n")
    secret.chmod(0o600)
    try:
        workdir = scratch / "code"
        workdir.mkdir()
        os.chown(workdir, NOBODY, NOBODY)
        site = next(Path(REPO, ".venv", "lib").glob("python3*/site-packages"))
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(scratch),
            "XDG_DATA_HOME": str(scratch / "data"),
            "PYTHONPATH": f"{site}:{REPO}",
        }
        report = scratch / "report.json"
        options = ["--executor", "docker", "--config", "cpuset=0", "--repeat", "1", "--evidence", "none"]
        paths = ["--workdir", str(workdir), "--json", str(report)]
        done = subprocess.run(
            [SYSTEM_PYTHON, "-m", "cli.main", "run", *options, *paths, "--", "python3", "-c", PLANT],
            cwd=scratch,
            env=env,
            user=NOBODY,
            group=NOBODY,
            extra_groups=[grp.getgrnam("docker").gr_gid],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, done.stderr
        result = json.loads(report.read_text())
        assert result["executor"] == "docker"
        assert [run["exit_code"] for run in result["failed_runs"]] == [5]
        assert "ROOT-CANARY" not in report.read_text()
    finally:
        secret.unlink(missing_ok=True)


# Hides what it writes from a worker that is not root: a directory of mode 0700 in its run
# directory (the container's uid 1000 owns it), then MiB of blocks in it. A run taken again
# beside a busy neighbour finds its directory as it left it.
HIDE = (
    "import os, sys; run_dir = os.path.dirname(os.readlink('/proc/self/fd/1')); "
    "hidden = os.path.join(run_dir, 'hidden'); os.makedirs(hidden, 0o700, exist_ok=True); "
    "f = open(os.path.join(hidden, 'ballast'), 'wb'); os.posix_fallocate(f.fileno(), 0, int(sys.argv[1]) << 20)"
)


def as_nobody(scratch: Path, args: list[str], **settings: str) -> subprocess.CompletedProcess:
    """`lagtrace ARGS` as the ordinary user, its run directories under ``scratch/tmp``."""
    site = next(Path(REPO, ".venv", "lib").glob("python3*/site-packages"))
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(scratch),
        "XDG_DATA_HOME": str(scratch / "data"),
        "PYTHONPATH": f"{site}:{REPO}",
        "TMPDIR": str(scratch / "tmp"),
        **settings,
    }
    return subprocess.run(
        [SYSTEM_PYTHON, "-m", "cli.main", *args],
        cwd=scratch,
        env=env,
        user=NOBODY,
        group=NOBODY,
        extra_groups=[grp.getgrnam("docker").gr_gid],
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.mark.parametrize(("mib", "fails"), [(100, True), (8, False)])
def test_a_directory_closed_to_the_worker_hides_nothing_from_the_caps_and_is_removed(scratch, tmp_path, mib, fails):
    """A worker that is not root (the chart's) could neither see into a directory of mode
    0700 its run made nor remove it: 100 MiB a run passed a 32 MiB cap, and every run's
    directory stayed on the disk after the job (services/measure/executors/scratch.py)."""
    docker_ready(Settings(database_url=f"sqlite:///{tmp_path / 'x.db'}"))
    require(os.geteuid() == 0, "switching to an ordinary user needs root")
    for name in ("code", "tmp"):
        (scratch / name).mkdir()
        os.chown(scratch / name, NOBODY, NOBODY)
    options = ["--executor", "docker", "--config", "cpuset=0", "--repeat", "3", "--evidence", "none"]
    args = ["run", *options, "--workdir", str(scratch / "code"), "--", "python3", "-c", HIDE, str(mib)]
    done = as_nobody(scratch, args, LAGTRACE_RUN_DIR_MAX_BYTES=str(32 * 1024**2))
    print(f"\n{mib} MiB hidden a run: exit {done.returncode}; {done.stderr.strip().splitlines()[-1]}")
    if fails:
        assert done.returncode != 0, done.stderr
        assert "LAGTRACE_RUN_DIR_MAX_BYTES raises it" in done.stderr, done.stderr
    else:
        assert done.returncode == 0 and "exit 1" not in done.stderr, done.stderr
    left = [str(path.relative_to(scratch)) for path in (scratch / "tmp").rglob("*")]
    assert left == [], left
