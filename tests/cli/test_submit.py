"""`lagtrace serve`, `worker` and `submit` as a new user meets them: a work directory the
containers cannot read is refused at start-up, and a job whose command failed in every run
is printed with its command_failed finding, named on stderr, and exit 0 as `run` does."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import requests

from tests.conftest import REPO, run_cli


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_worker_whose_checkouts_the_containers_cannot_read_refuses_to_start(sqlite_url, tmp_path):
    work = tmp_path / "work"
    # umask 077: every checkout would be mode 0700 and each job would fail later, one by one.
    done = subprocess.run(
        ["/bin/sh", "-c", 'umask 077 && exec "$0" -m cli.main "$@"', sys.executable, "worker"],
        cwd=REPO,
        env={
            **os.environ,
            "LAGTRACE_DATABASE_URL": sqlite_url,
            "LAGTRACE_BROKER_URL": "redis://127.0.0.1:1/0",  # never reached: the check comes first
            "LAGTRACE_WORK_DIR": str(work),
        },
        capture_output=True,
        text=True,
        timeout=30,  # before the check, the worker started and waited for the broker
    )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"LAGTRACE_WORK_DIR={work}" in lines[0] and "uid 1000" in lines[0] and "umask 0077" in lines[0]


def test_serve_running_jobs_itself_refuses_an_unwritable_work_dir(sqlite_url, tmp_path):
    migrated = run_cli(["migrate"], sqlite_url)
    assert migrated.returncode == 0, migrated.stderr
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = run_cli(
        ["serve", "--port", str(free_port())],
        sqlite_url,
        env={"LAGTRACE_WORK_DIR": str(blocker / "work"), "LAGTRACE_BROKER_URL": ""},
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert f"LAGTRACE_WORK_DIR={blocker / 'work'}: cannot make a checkout there" in done.stderr


@contextlib.contextmanager
def serving(database_url: str, tmp_path: Path):
    """`lagtrace serve` without a broker (it runs the jobs itself), the local executor allowed."""
    port = free_port()
    env = {
        **os.environ,
        "LAGTRACE_DATABASE_URL": database_url,
        "LAGTRACE_BROKER_URL": "",
        "LAGTRACE_WORK_DIR": str(tmp_path / "work"),
        "LAGTRACE_ARTIFACT_DIR": str(tmp_path / "artifacts"),
        "LAGTRACE_ALLOWED_EXECUTORS": "local",
    }
    log = (tmp_path / "serve.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "serve", "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield f"http://127.0.0.1:{port}", env
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def test_submit_exits_0_with_the_report_and_names_a_command_that_failed_in_every_run(sqlite_url, tmp_path):
    assert run_cli(["migrate"], sqlite_url).returncode == 0
    token = run_cli(["token", "create", "--project", "octo/demo"], sqlite_url)
    assert token.returncode == 0, token.stderr
    code = tmp_path / "code"
    code.mkdir()
    (code / "broken.py").write_text("import sys\nprint('cannot import the thing under test')\nsys.exit(3)\n")
    with serving(sqlite_url, tmp_path) as (url, env):
        options = ["--dir", str(code), "--executor", "local", "--config", "cpuset=0", "--evidence", "none"]
        command = ["--poll", "0.2", "--", "python3", "broken.py"]
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "cli.main",
                "submit",
                "--url",
                url,
                "--token",
                token.stdout.strip(),
                *options,
                *command,
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        # The job's page in the dashboard is named as soon as the job is made.
        queued = re.search(r"^lagtrace: job (\d+) queued: (\S+)( \(.*\))?$", done.stderr, re.M)
        assert queued, done.stderr
        assert queued.group(2) == f"{url}/jobs/{queued.group(1)}"
        page = requests.get(queued.group(2), allow_redirects=False, timeout=10)
        assert page.status_code == 302 and page.headers["Location"].endswith(f"?next=/jobs/{queued.group(1)}")
    # As `lagtrace run`: a report was produced (docs/reference/cli.md); the command's
    # failure is its command_failed finding, and stderr names it.
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "command_failed" in done.stdout
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"lagtrace: job {queued.group(1)}: ") and "failed in all" in last, done.stderr
    assert "exit 3" in done.stdout and "cannot import the thing under test" in last
