"""The Docker engine fails under a running service (docs/guides/reliability.md): it goes away mid-screen and
comes back, and a job is cancelled while its dependencies install.

The engine the workers see is a forwarder in front of the shared one (engine_proxy.py),
killed and started again here: the shared engine is never stopped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from services.measure.executors.docker_guards import JOB_LABEL
from services.models import Finding, JobConfig, JobTask, Run, RunKind
from tests.chaos.conftest import EFFECTIVE, QUICK_YML, SLOW_YML, chaos_stack, record
from tests.conftest import REPO

OUTAGE_S = 20.0


class EngineProxy:
    """The engine as the workers reach it: DOCKER_HOST=unix://<socket>."""

    def __init__(self, directory: Path, target: str = "/var/run/docker.sock"):
        self.socket, self.target = directory / "engine.sock", target
        self.process: subprocess.Popen | None = None

    @property
    def docker_host(self) -> str:
        return f"unix://{self.socket}"

    def start(self) -> EngineProxy:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.chaos.engine_proxy", str(self.socket), self.target],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None and self.process.stdout.readline().strip() == "listening"
        return self

    def kill(self) -> float:
        """The engine gone: its connections broken, its socket refusing; the moment it went."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        return time.monotonic()


@pytest.fixture
def engine_proxy(tmp_path, engine_client) -> Iterator[EngineProxy]:
    directory = Path(os.environ.get("TMPDIR", "/tmp")) / f"lagtrace-engine-{os.getpid()}-{time.monotonic_ns()}"
    directory.mkdir()  # a short path: a unix socket's is limited to 107 bytes
    proxy = EngineProxy(directory).start()
    try:
        yield proxy
    finally:
        if proxy.process is not None and proxy.process.poll() is None:
            proxy.kill()
        proxy.socket.unlink(missing_ok=True)
        directory.rmdir()


def test_the_engine_away_mid_screen_is_waited_out_not_blamed_on_the_command(
    private_postgres, private_redis, engine_proxy, tmp_path, repository_with
):
    with chaos_stack(
        private_postgres, private_redis, tmp_path / "stack", DOCKER_HOST=engine_proxy.docker_host
    ) as stack:
        job_id = stack.push(repository_with(SLOW_YML))
        stack.wait_for_run(job_id)
        fault = engine_proxy.kill()
        time.sleep(OUTAGE_S)
        engine_proxy.start()
        back = time.monotonic()
        status, _ = stack.wait_final(job_id, EFFECTIVE.docker_engine_wait_s + 180)
        record(f"Docker engine away {OUTAGE_S:g} s mid-screen", "job done", time.monotonic() - fault)
        print(f"job done {time.monotonic() - back:.1f} s after the engine came back")
        _, job = stack.request("GET", f"/api/v1/jobs/{job_id}")
        assert status == "done", f"{job.get('error')}\n{stack.ledger(job_id)}\n{stack.logs()}"
        # Nothing of the interrupted run was stored, nor blamed on the command.
        kinds = [kind for (kind,) in stack.query(select(Finding.kind).where(Finding.job_id == job_id))]
        assert "command_failed" not in kinds, kinds
        exits = stack.query(
            select(Run.exit_code).join(JobConfig).where(JobConfig.job_id == job_id, Run.kind == RunKind.timing)
        )
        assert exits and all(code == 0 for (code,) in exits), exits
        # Paused, then given back: the outage cost the screen no attempt.
        attempts = {name: tries for name, _, tries, _ in stack.ledger(job_id)}
        assert attempts["screen"] == 1, attempts
        worker_logs = "".join(log.read_text() for log in stack.base.glob("worker*.log"))
        assert "paused: the Docker engine is unavailable" in worker_logs
        stack.assert_effects_once(job_id, repeat=4)


# A local package whose build backend sleeps: the dependency install runs for minutes
# without any network (no build requirement to fetch).
SLOW_PACKAGE = {
    "requirements.txt": "./slowpkg\n",
    "slowpkg/pyproject.toml": (
        '[build-system]\nrequires = []\nbuild-backend = "sleepy"\nbackend-path = ["."]\n'
        '[project]\nname = "slowpkg"\nversion = "1.0"\n'
    ),
    "slowpkg/sleepy.py": "import time\n\ntime.sleep(600)\n",
}


def commit_files(url: str, files: dict[str, str]) -> tuple[str, str]:
    path = Path(url.removeprefix("file://"))
    for name, content in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(content)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(path)]
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "a slow dependency"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    return url, head


def test_cancel_during_the_dependency_install_kills_its_container(stack, repository_with):
    url, _ = repository_with(QUICK_YML)
    job_id = stack.push(commit_files(url, SLOW_PACKAGE))
    deadline = time.monotonic() + 120
    while not (running := [c for c in stack.running_containers() if c.status == "running"]):
        assert time.monotonic() < deadline, f"the dependency install never started\n{stack.logs()}"
        time.sleep(0.2)
    [install] = running
    # The install container is the job's, as a run's is: that is how a cancel finds it.
    assert install.labels.get(JOB_LABEL) == str(job_id), install.labels
    time.sleep(2)  # well into the install
    cancelled = time.monotonic()
    status, answer = stack.request("POST", f"/api/v1/jobs/{job_id}/cancel")
    assert status == 200 and answer["status"] == "cancelled", answer
    bound = EFFECTIVE.heartbeat_interval_s + 10
    while left := [c for c in stack.running_containers() if c.status == "running"]:
        # Before, it slept on until LAGTRACE_DOCKER_PREPARE_TIMEOUT_S (900 s).
        assert time.monotonic() - cancelled < bound, f"still running: {[c.name for c in left]}\n{stack.logs()}"
        time.sleep(0.2)
    gone = time.monotonic() - cancelled
    record("cancel during the dependency install", "install container gone", gone)
    # The step stopped as cancelled, not as a failed install.
    deadline = time.monotonic() + 60
    while (states := dict(stack.query(select(JobTask.name, JobTask.state).where(JobTask.job_id == job_id))))[
        "prepare"
    ].value == "running":
        assert time.monotonic() < deadline, f"{states}\n{stack.logs()}"
        time.sleep(0.2)
    assert states["prepare"].value == "cancelled", states
    assert stack.status(job_id) == "cancelled"
