"""What a job's own code writes never stands in for what lagtrace measured or for what the
engine did: the measurement reaches the worker on the timer's stdout, which the command
cannot open; an install's output cannot hide the install's exit status; and a container
killed from outside while the engine answers counts as an attempt, so no step runs for
ever (services/jobs/lease.py)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import docker
import pytest

from services.errors import EngineUnavailable, LagtraceError
from services.measure.configs import CpuConfig
from services.measure.executors.base import RunRequest
from services.measure.executors.docker import DockerExecutor
from services.measure.executors.docker_guards import JOB_LABEL
from services.settings import Settings
from tests.security.conftest import docker_ready

# A measurement as the timer prints it, but of a run that took a millisecond and passed.
FORGED = {
    "wall_s": 0.001,
    "user_s": 0.0,
    "sys_s": 0.0,
    "max_rss_kb": 1,
    "voluntary_ctx_switches": 0,
    "involuntary_ctx_switches": 0,
    "exit_code": 0,
    "timed_out": False,
    "throttling": None,
    "busy_cpu_s": None,
    "read_syscalls": 0,
    "read_bytes": 0,
    "oom_killed": False,
}
# The timer is the container's first process and the command's parent: both names of its
# stdout are tried.
FORGER = f"""
import os, time
for target in ("/proc/1/fd/1", f"/proc/{{os.getppid()}}/fd/1"):
    try:
        with open(target, "w") as out:
            out.write({json.dumps(json.dumps(FORGED))} + "\\n")
        print("forged through", target)
    except OSError as exc:
        print("refused", target, exc.strerror)
time.sleep(1.0)
raise SystemExit(3)
"""


@pytest.fixture
def workdir(tmp_path) -> Path:
    tmp_path.chmod(0o755)  # pytest makes it 0700; the container's uid 1000 must read it
    directory = tmp_path / "code"
    directory.mkdir()
    return directory


def executor(tmp_path: Path, job_id: int | None = None) -> DockerExecutor:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'x.db'}")
    docker_ready(settings)
    return DockerExecutor(settings, cache_scope=f"test-{time.time_ns()}", job_id=job_id)


def run(executor: DockerExecutor, workdir: Path, code: str, job_id: int = 0):
    run_dir = workdir.parent / f"run-{time.time_ns()}"
    run_dir.mkdir()
    request = RunRequest(["python3", "-c", code], workdir, CpuConfig("all"), run_dir, 60, job_id=job_id)
    return executor.run(request), run_dir / "output.log"


def test_a_command_cannot_write_the_measurement_through_the_timers_stdout(workdir, tmp_path):
    result, output = run(executor(tmp_path), workdir, FORGER)
    text = output.read_text()
    assert "forged through" not in text, text
    assert text.count("refused") == 2 and "Permission denied" in text, text
    # Measured as what it was: a second of sleep, then exit 3.
    assert result.exit_code == 3 and result.wall_s >= 1.0, (result, text)


# A local package whose build backend, imported by pip's build hook, writes to the
# container's stdout (the prepare script's own, PID 1's) without a newline, then kills
# its process group (pip and the install's subshell; PID 1 ignores it) so that nothing
# else is written before the script's exit mark.
HIDING_PACKAGE = {
    "requirements.txt": "./hidepkg\n",
    "hidepkg/pyproject.toml": (
        '[build-system]\nrequires = []\nbuild-backend = "hider"\nbackend-path = ["."]\n'
        '[project]\nname = "hidepkg"\nversion = "1.0"\n'
    ),
    "hidepkg/hider.py": (
        'import os, signal\nwith open("/proc/1/fd/1", "w") as out:\n    out.write("x")\nos.killpg(0, signal.SIGKILL)\n'
    ),
}


def test_an_install_that_writes_before_the_exit_mark_fails_as_an_install(workdir, tmp_path):
    for name, content in HIDING_PACKAGE.items():
        (workdir / name).parent.mkdir(parents=True, exist_ok=True)
        (workdir / name).write_text(content)
    # Before, the mark followed the "x" on one line, the install read as killed from
    # outside, and the step was given back uncounted: the same again on every attempt.
    with pytest.raises(LagtraceError, match="installing the dependencies failed") as failed:
        executor(tmp_path).prepare(workdir, lambda message: None)
    assert not isinstance(failed.value, EngineUnavailable)
    assert "(exit 137)" in str(failed.value), failed.value


def test_a_run_container_killed_from_outside_is_the_engines_and_counts(workdir, tmp_path):
    job_id = time.time_ns() % 1_000_000_000
    client = docker.from_env()
    killed: list[str] = []

    def kill_when_running() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            for container in client.containers.list(filters={"label": f"{JOB_LABEL}={job_id}"}):
                container.kill()
                killed.append(container.name)
            time.sleep(0.2)

    killer = threading.Thread(target=kill_when_running, daemon=True)
    killer.start()
    try:
        with pytest.raises(EngineUnavailable, match="killed from outside the command") as away:
            run(executor(tmp_path, job_id), workdir, "import time; time.sleep(30)", job_id=job_id)
    finally:
        killer.join()
        client.close()
    assert killed
    # The engine answered throughout: the lease counts this attempt (services/jobs/lease.py).
    assert away.value.answered


CAP_SYS_PTRACE = 1 << 19  # <linux/capability.h>
READ_BOUNDING_SET = (
    "import re; status = open('/proc/self/status').read(); "
    "print('bounding', int(re.search(r'CapBnd:\\s*(\\w+)', status)[1], 16))"
)


def bounding_set(executor: DockerExecutor, workdir: Path, *, ptrace: bool) -> int:
    run_dir = workdir.parent / f"run-{time.time_ns()}"
    run_dir.mkdir()
    request = RunRequest(
        ["python3", "-c", READ_BOUNDING_SET], workdir, CpuConfig("all"), run_dir, 60, job_id=0, ptrace=ptrace
    )
    result = executor.run(request)
    text = (run_dir / "output.log").read_text()
    assert result.exit_code == 0, text
    return int(text.split("bounding", 1)[1])


def test_only_runs_whose_probe_attaches_to_the_command_may_use_ptrace(workdir, tmp_path):
    runs = executor(tmp_path)
    # A timing run: no capability at all, ptrace's included.
    assert bounding_set(runs, workdir, ptrace=False) == 0
    # An evidence run of strace, py-spy or gdb (Probe.ptrace): that one and no other.
    assert bounding_set(runs, workdir, ptrace=True) == CAP_SYS_PTRACE
