"""The local executor: a subprocess pinned with sched_setaffinity, quota'd with a cgroup.

The parent blocks in wait4() while the command runs (no polling), so lagtrace itself
puts no load on the neighbouring cores whose idleness is often the very cause under
study.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from services.errors import BadInput
from services.measure import cgroups, hostload
from services.measure.executors.base import RunRequest, RunResult, ToolResult
from services.measure.executors.scratch import ScratchAccount, ScratchWatch, account_for
from services.measure.executors.stall_clock import StallClock, wait_unreaped
from services.settings import Settings

OUTPUT_TAIL_LINES = 20
OUTPUT_TAIL_BYTES = 64 * 1024
# What the command inherits from lagtrace's own environment: how to find programs and
# speak the locale, nothing else. lagtrace's settings (database URL, secret key, GitHub
# token, webhook secret) and whatever else the caller exported stay out of the child.
INHERITED_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR", "VIRTUAL_ENV")


# Tools lagtrace's own environment installs from PyPI (found beside its interpreter);
# any other name there may be a script a package of the job's put in a shared venv.
PYPI_TOOLS = ("py-spy", "pystack")
# A tool run without a timeout of its own gets this one.
DEFAULT_TOOL_TIMEOUT_S = 300.0


def host_tool_path() -> str:
    """lagtrace's PATH without any virtualenv's bin directory: where the host's own tools
    (strace, gdb, gcore's bash) are looked up, so that a package installing ``bin/strace``
    into an activated venv is never run for one (tests/security/test_tool_paths.py)."""
    kept = [
        directory
        for directory in os.environ.get("PATH", os.defpath).split(os.pathsep)
        if directory and not (Path(directory).parent / "pyvenv.cfg").exists()
    ]
    return os.pathsep.join(kept) or os.defpath


def tool_environment() -> dict[str, str]:
    """A tool's environment: the command's inherited one, on the host's own PATH."""
    return {**child_environment({}), "PATH": host_tool_path()}


def child_environment(extra: dict[str, str]) -> dict[str, str]:
    """The command's environment, built from scratch rather than copied and filtered."""
    env = {key: os.environ[key] for key in INHERITED_ENV if key in os.environ}
    env.update({key: value for key, value in os.environ.items() if key.startswith("LC_")})
    env.setdefault("PATH", os.defpath)
    return {**env, **extra}


class LocalExecutor:
    name = "local"

    def __init__(self, settings: Settings):
        self.settings = settings
        self._hierarchy: cgroups.Hierarchy | str | None = None
        # Where runs count what they write outside a step (services/measure/executors/scratch.py).
        self.scratch = ScratchAccount(settings)

    def available_cpus(self) -> tuple[int, ...]:
        return tuple(sorted(os.sched_getaffinity(0)))

    def _quota_hierarchy(self) -> cgroups.Hierarchy | str:
        if self._hierarchy is None:
            self._hierarchy = cgroups.probe(self.settings.cgroup_root, self.settings.cgroup_name)
        return self._hierarchy

    def quota_unsupported_reason(self) -> str | None:
        found = self._quota_hierarchy()
        return found if isinstance(found, str) else None

    def prepare(self, workdir: Path, progress: Callable[[str], None]) -> None:
        """Nothing to build: the local executor runs in the host's environment as it is."""

    def check_command(self, command: list[str], workdir: Path) -> None:
        if not command:
            raise BadInput("no command given: write it after --, e.g. lagtrace run -- python3 prog.py")
        if not workdir.is_dir():
            raise BadInput(f"working directory {workdir} does not exist")
        program = command[0]
        if "/" in program:
            path = program if os.path.isabs(program) else os.path.join(workdir, program)
            if not os.path.isfile(path):
                raise BadInput(f"cannot execute {program!r}: no such file")
            if not os.access(path, os.X_OK):
                raise BadInput(f"cannot execute {program!r}: not executable")
        elif shutil.which(program) is None:
            raise BadInput(f"cannot execute {program!r}: not found on PATH")

    def visible_path(self, run_dir: Path, name: str = "") -> str:
        return str(run_dir / name) if name else str(run_dir)

    def repository_paths(self, text: str) -> str:
        return text  # the command saw the host's own paths

    def tool_path(self, name: str) -> str | None:
        # Tools installed into lagtrace's own environment (py-spy from PyPI) come first.
        beside_python = Path(sys.executable).parent / name
        if name in PYPI_TOOLS and beside_python.exists():
            return str(beside_python)
        return shutil.which(name, path=host_tool_path())

    def run(self, request: RunRequest) -> RunResult:
        group = None
        if request.config.cpus is not None:
            hierarchy = self._quota_hierarchy()
            if isinstance(hierarchy, str):
                raise BadInput(f"--config {request.config.label}: CPU quotas cannot be enforced here: {hierarchy}")
            group = cgroups.QuotaGroup(hierarchy, request.config.cpus)
            group.create()
        # The run directory's caps hold here too: the command is trusted, its mistakes are not.
        watch = ScratchWatch(request.run_dir, account_for(self.scratch), request.config.label)
        try:
            result = self._run(request, group, watch)
        finally:
            if group is not None:
                group.remove()
            exceeded = watch.settle()
        if exceeded is not None:
            raise exceeded
        return result

    def _run(self, request: RunRequest, group: cgroups.QuotaGroup | None, watch: ScratchWatch) -> RunResult:
        cpuset = request.config.cpuset

        def enter_configuration() -> None:  # runs in the child, between fork and exec
            if cpuset is not None:
                os.sched_setaffinity(0, cpuset)
            if group is not None:
                group.join_current_process()

        output_path = request.run_dir / "output.log"
        env = child_environment(request.env)
        # The stall clock runs here, in the parent: it freezes the command's process group
        # at the deadline itself (one killpg), as the container timer does in a container.
        clock = (
            StallClock({**request.stall_clock, "tool_env": tool_environment()})
            if request.stall_clock is not None
            else None
        )
        with open(output_path, "wb") as output:
            busy_before = hostload.busy_cpu_seconds(cpuset)
            io_before = hostload.own_io()
            started = time.perf_counter()
            try:
                proc = subprocess.Popen(
                    request.command,
                    cwd=request.workdir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    preexec_fn=enter_configuration,
                    start_new_session=True,  # one process group to kill at the timeout
                )
            except (FileNotFoundError, PermissionError, OSError) as exc:
                raise BadInput(f"cannot execute {request.command[0]!r}: {exc.strerror or exc}") from None
            timed_out = threading.Event()

            def kill_at_timeout() -> None:
                timed_out.set()
                _kill_group(proc.pid)

            watch.start(lambda: _kill_group(proc.pid))
            if clock is not None:
                clock.start(proc.pid, started)
            if request.watcher is not None:
                request.watcher.started(LocalProcessHandle(proc.pid))
            timer = None
            if request.timeout_s is not None:
                timer = threading.Timer(request.timeout_s, kill_at_timeout)
                timer.daemon = True
                timer.start()
            try:
                # Ended but not reaped (WNOWAIT) until a snapshot in progress is done.
                wait_unreaped(proc.pid)
                watch.finish()  # before the reap: its kill must never reach a reused pid
                wall_s = time.perf_counter() - started
                run_delay_s = hostload.run_delay_s(proc.pid)
                if clock is not None:
                    clock.stop()
                _, status, usage = os.wait4(proc.pid, 0)
            finally:
                if timer is not None:
                    timer.cancel()
                watch.finish()
            busy_after = hostload.busy_cpu_seconds(cpuset)
            io_after = hostload.own_io()
            if request.watcher is not None:
                request.watcher.finished()
            proc.returncode = os.waitstatus_to_exitcode(status)  # we reaped it, not Popen
            # Background processes the command left behind would load the next run.
            _kill_group(proc.pid)

        stat = group.cpu_stat() if group is not None else None
        exit_code = proc.returncode
        return RunResult(
            wall_s=wall_s,
            user_s=usage.ru_utime,
            sys_s=usage.ru_stime,
            max_rss_kb=usage.ru_maxrss,
            voluntary_ctx_switches=usage.ru_nvcsw,
            involuntary_ctx_switches=usage.ru_nivcsw,
            exit_code=exit_code,
            timed_out=timed_out.is_set(),
            nr_periods=stat.nr_periods if stat else None,
            nr_throttled=stat.nr_throttled if stat else None,
            throttled_s=stat.throttled_s if stat else None,
            foreign_cpus=hostload.foreign_cpus(busy_before, busy_after, usage.ru_utime + usage.ru_stime, wall_s),
            run_delay_s=run_delay_s,
            read_syscalls=io_after["syscr"] - io_before["syscr"],
            read_bytes=io_after["rchar"] - io_before["rchar"],
            output_tail=_tail(output_path) if exit_code != 0 or timed_out.is_set() else None,
        )


class LocalProcessHandle:
    def __init__(self, pid: int):
        self.pid = pid

    def run_tool(self, argv: list[str], timeout_s: float | None = None) -> ToolResult:
        started = time.perf_counter()
        timeout_s = DEFAULT_TOOL_TIMEOUT_S if timeout_s is None else timeout_s
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, errors="replace", timeout=timeout_s, env=tool_environment()
            )
            returncode, stdout, stderr = done.returncode, done.stdout, done.stderr
        except subprocess.TimeoutExpired as exc:
            returncode, stdout, stderr = -9, _text(exc.stdout), _text(exc.stderr) + f"\ntimed out after {timeout_s} s"
        except OSError as exc:
            returncode, stdout, stderr = 127, "", f"cannot run {argv[0]}: {exc.strerror or exc}"
        return ToolResult(returncode, stdout, stderr, time.perf_counter() - started)

    def copy_out(self, path: str, host_path: Path) -> None:
        if Path(path) != host_path:
            shutil.move(path, host_path)


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(path: Path) -> str:
    """The last lines of a command's output, read from at most its last 64 kB.

    Not through a link and only from a regular file: a container's command can replace
    its own output file by a link to any file of the host, or by a FIFO that never ends.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        return f"lagtrace: the output {path.name} could not be read safely ({exc.strerror})\n"
    with os.fdopen(fd, "rb") as handle:
        size = os.fstat(fd)
        if not stat.S_ISREG(size.st_mode):
            return f"lagtrace: the output {path.name} is not a regular file; not read\n"
        handle.seek(max(0, size.st_size - OUTPUT_TAIL_BYTES))
        lines = deque(handle.read(OUTPUT_TAIL_BYTES).splitlines(keepends=True), maxlen=OUTPUT_TAIL_LINES)
    return b"".join(lines).decode("utf-8", "replace")
