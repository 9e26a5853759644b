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
