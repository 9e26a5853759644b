"""Nothing of the job's is on the way of lagtrace's own tools: a dependency that installs
``bin/timeout``, ``bin/strace``, ``bin/env``, ``bin/kill`` or ``bin/bash`` into the job's
venv (first on the prepared image's PATH) is the job's own command's business, and never
runs for lagtrace's strace, its exec wrappers or gcore's shell (docs/guides/security.md)."""

from __future__ import annotations

import stat
import threading
import time
import zipfile
from pathlib import Path

import pytest

from services.measure.configs import CpuConfig
from services.measure.executors.base import ProcessHandle, RunRequest, ToolResult
from services.measure.executors.docker import DockerExecutor
from services.measure.executors.docker_prepare import DEPS_VENV, IMAGE_PATH
from services.measure.probes.base import ProbeContext
from services.measure.probes.strace import SUMMARY_FILE, StraceProbe
from services.settings import Settings
from tests.security.conftest import docker_ready

FORGED_SYSCALL = "forged_by_the_job"
# Each hangs for ever where lagtrace would wait on it.
HANG = "#!/bin/sh\nwhile :; do sleep 1; done\n"
# Writes a syscall table of its own to strace's -o file, then runs the command untraced.
FORGER = f"""#!/bin/sh
out=
while [ "$#" -gt 0 ]; do
  case "$1" in
    -o) out="$2"; shift 2 ;;
    --) shift; break ;;
    *) shift ;;
  esac
done
printf '%% time     seconds  usecs/call     calls    errors syscall\\n' > "$out"
printf '100.00    0.000001           1         1           {FORGED_SYSCALL}\\n' >> "$out"
printf '100.00    0.000001           1         1           total\\n' >> "$out"
exec "$@"
"""
FAKE_TOOLS = {"timeout": HANG, "env": HANG, "kill": HANG, "bash": HANG, "cat": HANG, "strace": FORGER}


def fake_tools_wheel(directory: Path) -> Path:
    """A wheel whose scripts go to the venv's bin/, executable (pip keeps the zip's mode)."""
    name, version = "lagtrace_fake_tools", f"1.0.{time.time_ns()}"
    info, data = f"{name}-{version}.dist-info", f"{name}-{version}.data/scripts"
    files = {
        f"{name}/__init__.py": "",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: lagtrace-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        **{f"{data}/{tool}": text for tool, text in FAKE_TOOLS.items()},
    }
    record = "".join(f"{path},,\n" for path in files) + f"{info}/RECORD,,\n"
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in {**files, f"{info}/RECORD": record}.items():
            entry = zipfile.ZipInfo(path)
            # The file type too: pip makes a script executable only for a regular file's mode.
            entry.external_attr = (stat.S_IFREG | (0o755 if path.startswith(data) else 0o644)) << 16
            archive.writestr(entry, text)
    return wheel


@pytest.fixture
def prepared(tmp_path):
    """An executor whose run image has the fake tools first on the job's PATH."""
    tmp_path.chmod(0o755)  # the container's uid 1000 reads the tree
    workdir = tmp_path / "code"
    workdir.mkdir()
    wheel = fake_tools_wheel(workdir)
    (workdir / "requirements.txt").write_text(f"./{wheel.name}\n")
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'x.db'}", docker_prepare_network="none")
    docker_ready(settings)
    executor = DockerExecutor(settings, cache_scope=f"test-{time.time_ns()}")
    executor.prepare(workdir, lambda message: None)
    assert executor.run_image.startswith("lagtrace-deps:")
    yield executor, workdir
    executor.client.images.remove(executor.run_image, force=True)


def run_dir_of(workdir: Path) -> Path:
    run_dir = workdir.parent / f"run-{time.time_ns()}"
    run_dir.mkdir()
    return run_dir


def test_the_jobs_path_finds_the_fakes_its_own_command_runs_with(prepared):
    # The control: the trap is set. The job's command still runs with the job's PATH.
    executor, workdir = prepared
    code = "import shutil; print(*(shutil.which(t) for t in ('timeout', 'strace', 'env', 'kill')))"
    run_dir = run_dir_of(workdir)
    result = executor.run(RunRequest(["python3", "-c", code], workdir, CpuConfig("all"), run_dir, 60, job_id=0))
    assert result.exit_code == 0, result.output_tail
    found = (run_dir / "output.log").read_text().split()
    assert found == [f"{DEPS_VENV}/bin/{tool}" for tool in ("timeout", "strace", "env", "kill")]


def test_lagtraces_tools_are_the_images_own(prepared):
    executor, _ = prepared
    for tool in ("strace", "timeout", "env", "kill", "sh", "cat", "gdb", "gcore"):
        path = executor.tool_path(tool)
        # Absolute, and in a directory of the image's own PATH, never the venv.
        assert path is not None and path.startswith("/"), (tool, path)
        assert path.rsplit("/", 1)[0] in IMAGE_PATH.split(":") and not path.startswith(DEPS_VENV), (tool, path)


def test_a_fake_strace_and_timeout_in_the_venv_change_nothing_lagtrace_measures(prepared):
    executor, workdir = prepared
    run_dir = run_dir_of(workdir)
    timeout_s = 8.0
    # Stopped by lagtrace's kill (through env and timeout in the container) 3 s before the
    # timeout: before, the venv's timeout held that exec for ever and strace's table was the job's.
    context = ProbeContext(executor, run_dir, stall_after_s=60, timeout_s=timeout_s, last_snapshot_lead_s=3.0)
    probe = StraceProbe(context)
    assert probe.unavailable() is None
    code = "import os, time\nfor _ in range(200): os.getpid(); os.stat('/')\ntime.sleep(30)"
    watcher = probe.watcher()
    request = RunRequest(
        probe.command(["python3", "-c", code]),
        workdir,
        CpuConfig("all"),
        run_dir,
        timeout_s,
        watcher=watcher,
        job_id=0,
        ptrace=True,
    )
    started = time.monotonic()
    result = executor.run(request)
    elapsed = time.monotonic() - started
    # Ended by lagtrace's own kill before the timeout, not at it, and within it in any case.
    assert probe.stopped_before_timeout and not result.timed_out, result
    assert elapsed < timeout_s + 5, elapsed
    summary = (run_dir / SUMMARY_FILE).read_text()
    assert FORGED_SYSCALL not in summary, summary
    [evidence] = probe.collect(result)
    names = {row["name"] for row in evidence.content.model_dump()["syscalls"]}
    assert "newfstatat" in names or "stat" in names, names


class ToolRunner:
    """A watcher that runs tools through the handle while the command runs."""

    def __init__(self, calls: list[tuple[list[str], float]]):
        self.calls = calls
        self.results: list[tuple[ToolResult, float]] = []
        self._thread: threading.Thread | None = None

    def started(self, handle: ProcessHandle) -> None:
        def work() -> None:
            for argv, timeout_s in self.calls:
                began = time.monotonic()
                result = handle.run_tool([part.replace("{pid}", str(handle.pid)) for part in argv], timeout_s)
                self.results.append((result, time.monotonic() - began))

        self._thread = threading.Thread(target=work, daemon=True)
        self._thread.start()

    def finished(self) -> None:
        if self._thread is not None:
            self._thread.join(60)


def test_tools_start_from_lagtraces_environment_and_each_exec_has_a_deadline(prepared):
    executor, workdir = prepared
    cat, gcore, sleep = executor.tool_path("cat"), executor.tool_path("gcore"), "/bin/sleep"
    assert cat and gcore
    runner = ToolRunner(
        [
            ([cat, "/proc/self/environ"], 10.0),
            # gcore is a bash script run through env(1): with the job's PATH, the venv's bash.
            ([gcore, "-o", "/tmp/core", "{pid}"], 60.0),
            ([sleep, "600"], 1.0),
        ]
    )
    run_dir = run_dir_of(workdir)
    request = RunRequest(
        ["python3", "-c", "import time; time.sleep(20)"],
        workdir,
        CpuConfig("all"),
        run_dir,
        40,
        env={"PYTHONPATH": "/workspace/planted"},
        watcher=runner,
        job_id=0,
        ptrace=True,
    )
    executor.run(request)
    (environ, _), (core, _), (slept, slept_s) = runner.results
    variables = dict(item.split("=", 1) for item in environ.stdout.split("\0") if item)
    assert environ.returncode == 0 and variables["PATH"] == IMAGE_PATH, environ
    assert "PYTHONPATH" not in variables and "VIRTUAL_ENV" not in variables, variables
    assert core.returncode == 0 and "Saved corefile" in core.stdout + core.stderr, core
    assert slept.returncode == -9 and slept_s < 10, (slept, slept_s)
