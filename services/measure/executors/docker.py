"""The docker executor: each run in its own hardened container, measured from inside.

- CPU configuration: ``nano_cpus`` for a quota, ``cpuset_cpus`` for pinning.
- Hardening for untrusted test code: no network, read-only root with a tmpfs for
  scratch, every capability dropped (SYS_PTRACE kept only in the evidence runs whose
  tool attaches to the command), no-new-privileges, the engine's default seccomp profile, uid 1000, memory
  and pids limits, and no Docker socket inside.
- Timing: container start-up takes about 200 ms, so the clock and the rusage are read by
  ``container_timer`` inside the container, around fork/exec and wait4.
- Paths: the working tree is mounted read-only at /workspace (the working directory) and
  the run's directory writable at /lagtrace/run, whatever their host paths: a host path
  mounted at itself would sit below the image's own directories (its /root is mode 0700,
  closed to uid 1000; /var/tmp would hide the image's). Host paths under either in the
  command become their container paths; what the tools report about /workspace comes
  back relative to the checkout (``repository_paths``).
- Cleanup: containers carry ``lagtrace.job``, ``lagtrace.installation`` (Settings.installation)
  and ``lagtrace.owner`` (host, pid and start time of the lagtrace process) labels; each
  run's container is removed when the run ends however it ends, ``reap_orphans`` removes
  what a killed lagtrace of this installation left behind (never another installation's),
  and ``stop_job_containers`` kills a cancelled job's runs at once (the dependency install
  and the one-shot containers carry the job label too): docker_guards.py, with the guards
  on what a container leaves in the run directory.
- Dependencies: installed once per lock-file content into a cached image (docker_prepare.py).
- Engine outages: whatever the engine does instead of answering (the socket refuses or
  resets, a read times out, a 5xx, a log stream that breaks off, a container killed from
  outside its command) raises ``EngineUnavailable``, never a failed run: the service waits
  the engine out (services/jobs/lease.py) and runs the step again (docker_engine.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import threading
import time
import uuid
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import requests
from docker.errors import APIError, ImageNotFound
from docker.types import Mount

from services.errors import BadInput, EngineUnavailable, LagtraceError
from services.measure import hostload
from services.measure.configs import parse_cpulist
from services.measure.executors.base import RunRequest, RunResult, RunWatcher
from services.measure.executors.docker_engine import BUILD_HINT, connect, engine_calls, engine_trouble, reason
from services.measure.executors.docker_exec import TOOL_ENV, DockerProcessHandle
from services.measure.executors.docker_guards import (
    CONTAINER_PYTHON,
    INSTALLATION_LABEL,
    JOB_LABEL,
    OWNER_LABEL,
    RUN_DIR,
    RUNNER_USER,
    WORKSPACE,
    check_workdir,
    container_command,
    disarm_run_dir,
    give_to_runner,
    kill_container,
    owner_id,
    reap_orphans,
    remove_container,
)
from services.measure.executors.docker_lookup import SHELL, locate, locate_tools, one_shot, open_run_dir
from services.measure.executors.docker_prepare import prepare_dependencies
from services.measure.executors.local import _tail
from services.measure.executors.scratch import ScratchAccount, ScratchWatch, account_for
from services.settings import Settings

TOOLS_DIR = "/lagtrace/tools"
# /workspace/... where a tool reports a path: not inside another path (/x/workspace/...).
_WORKSPACE_PATH = re.compile(r"(?<![\w.~/-])" + re.escape(WORKSPACE) + "/")
IN_IMAGE_TOOLS = ("strace", "gdb", "gcore", "env", "timeout", "kill", "cat", "sh")
# The timer kills the command at the timeout itself; the engine-side kill is the backstop
# for a timer that cannot (its container frozen or out of memory).
BACKSTOP_GRACE_S = 30.0
# How long a finished run's container waits for evidence tools before its timer exits,
# should lagtrace die before removing it (it is removed at once otherwise).
LINGER_S = 900
# After a run's log stream ends without the measurement: how long the container is given
# to exit before the stream is taken to have broken off with the run still going.
STREAM_END_WAIT_S = 10


class DockerExecutor:
    name = "docker"

    def __init__(
        self,
        settings: Settings,
        image: str | None = None,
        progress: Callable[[str], None] = lambda m: None,
        cache_scope: str = "",
        job_id: int | None = None,
    ):
        self.settings = settings
        # Labels every container this executor starts, so a cancel finds them all.
        self.job_id = job_id
        self.image = image or settings.docker_image
        # Prepared dependency images are keyed by this too (the service: the project), so
        # one project's code never runs in an image another project's install built.
        self.cache_scope = cache_scope
        self.client = connect()
        with engine_calls("looking up the runner image"):
            try:
                # The id the engine keys the image by (Image.id is its "Id", typed optional).
                self._image_id: str = self.client.images.get(self.image).attrs["Id"]
            except ImageNotFound:
                raise BadInput(f"image {self.image!r} does not exist in the Docker engine; {BUILD_HINT}") from None
            info = self.client.info()
        self._ncpu = int(info.get("NCPU") or 1)
        self._cfs_quota = bool(info.get("CpuCfsQuota", True))
        self._cpus: tuple[int, ...] | None = None
        # Runs use the prepared image once prepare() has installed the job's dependencies.
        self.run_image = self.image
        self._owner = owner_id()
        self._py_spy = _host_py_spy()
        self._tools: dict[str, str | None] = {}
        # Where runs count what they write outside a step (services/measure/executors/scratch.py).
        self.scratch = ScratchAccount(settings)
        with engine_calls("removing containers left by a killed lagtrace"):
            reaped = reap_orphans(self.client, settings.installation)
        if reaped:
            progress(f"removed {len(reaped)} container(s) left by a lagtrace process that was killed")

    # -- what configurations may name -------------------------------------------------

    def available_cpus(self) -> tuple[int, ...]:
        """The CPUs the engine's containers may run on: NCPU counts the machine, but an
        engine confined to a cpuset (a pod's whole cores, LAGTRACE_DOCKER_CGROUP_PARENT)
        gives its containers only those; a run pinned outside them would not start."""
        if self._cpus is None:
            # As a run container sees it: same hardening, same cgroup parent. About 0.3 s,
            # once per executor (once per prepare step).
            script = (
                "cat /sys/fs/cgroup/cpuset.cpus.effective 2>/dev/null "
                "|| cat /sys/fs/cgroup/cpuset/cpuset.effective_cpus 2>/dev/null"
            )
            seen = one_shot(self, [SHELL, "-c", script], image=self.image).strip()
            everything = tuple(range(self._ncpu))
            try:
                confined = set(parse_cpulist(seen)) & set(everything) if seen else set(everything)
            except BadInput:
                confined = set(everything)
            self._cpus = tuple(sorted(confined)) or everything
        return self._cpus

    def quota_unsupported_reason(self) -> str | None:
        return None if self._cfs_quota else "the Docker engine reports no CFS quota support (CpuCfsQuota false)"

    # -- preparing and checking the job's environment ----------------------------------

    def prepare(self, workdir: Path, progress: Callable[[str], None]) -> None:
        """Install the working tree's requirements once, into an image cached by their hash.

        Measured runs then start from that image with everything installed and no network.
        The cache key covers the base image too, so a rebuilt runner image re-prepares.
        """
        with engine_calls("installing the dependencies"):
            prepared = prepare_dependencies(self, workdir, progress)
        if prepared is not None:
            self.run_image = prepared
            self._tools.clear()

    def check_command(self, command: list[str], workdir: Path) -> None:
        if not command:
            raise BadInput("no command given: write it after --, e.g. lagtrace run -- python3 prog.py")
        check_workdir(workdir)
        program = command[0]
        inside = program if os.path.isabs(program) else os.path.join(WORKSPACE, program)
        if program == workdir.as_posix() or program.startswith(workdir.as_posix() + "/"):
            inside = WORKSPACE + program[len(workdir.as_posix()) :]
        path = os.path.normpath(inside)
        if "/" in program and Path(path).is_relative_to(WORKSPACE):
            # The working tree is mounted at /workspace: its host files are the container's.
            path = os.path.join(workdir, os.path.relpath(path, WORKSPACE))
            if not os.path.isfile(path):
                raise BadInput(f"cannot execute {program!r}: no such file")
            if not os.access(path, os.X_OK):
                raise BadInput(f"cannot execute {program!r}: not executable")
        else:
            with engine_calls("looking for the command in the image"):
                found = locate(self, [program])[program]
            if found is not None:
                return
            where = "no such file" if "/" in program else "not found on PATH"
            raise BadInput(f"cannot execute {program!r}: {where} in the image {self.run_image}")

    # -- paths and tools ---------------------------------------------------------------

    def visible_path(self, run_dir: Path, name: str = "") -> str:
        return f"{RUN_DIR}/{name}" if name else RUN_DIR

    def repository_paths(self, text: str) -> str:
        return _WORKSPACE_PATH.sub("", text)

    def tool_path(self, name: str) -> str | None:
        if name == "py-spy":
            return f"{TOOLS_DIR}/py-spy" if self._py_spy else None
        if name not in self._tools:
            with engine_calls("looking for the evidence tools in the image"):
                self._tools.update(locate_tools(self, sorted({*IN_IMAGE_TOOLS, name})))
        return self._tools[name]

    # -- one run -----------------------------------------------------------------------

    def run(self, request: RunRequest) -> RunResult:
        give_to_runner(request.run_dir)
        watch = ScratchWatch(request.run_dir, account_for(self.scratch), request.config.label)
        with engine_calls(f"running {request.config.label}"):
            try:
                container = self.client.containers.create(self.run_image, **self._run_kwargs(request))
            except APIError as exc:
                raise self._engine_refused(f"the run container for {request.config.label}", exc) from None
            try:
                result = self._run(container, request, watch)
            finally:
                # Also on timeout, on Ctrl-C (cancel) and when a watcher raises.
                remove_container(container)
                open_run_dir(self, request.run_dir)  # a worker that is not root: all of it in reach
                # Only now, with no process of the job left to plant another, is what the
                # container wrote safe to open: links and special files are removed first.
                disarm_run_dir(request.run_dir)
                exceeded = watch.settle()
            if exceeded is not None:
                raise exceeded
            assert result is not None, "a run stopped by its scratch watch is over a cap"
            return result

    def _run_kwargs(self, request: RunRequest) -> dict:
        config = request.config
        output = self.visible_path(request.run_dir, "output.log")
        timeout = "none" if request.timeout_s is None else repr(request.timeout_s)
        mounts = [
            Mount(WORKSPACE, str(request.workdir), type="bind", read_only=True),
            Mount(RUN_DIR, str(request.run_dir), type="bind", read_only=False),
        ]
        if self._py_spy:
            mounts.append(Mount(f"{TOOLS_DIR}/py-spy", self._py_spy, type="bind", read_only=True))
        return dict(
            command=[
                CONTAINER_PYTHON,
                "-I",
                "-S",
                "-c",
                timer_source(),
                output,
                timeout,
                str(LINGER_S),
                # The clock's snapshot tools (gcore, py-spy) start from lagtrace's environment.
                "none" if request.stall_clock is None else json.dumps({**request.stall_clock, "tool_env": TOOL_ENV}),
                "--",
                *container_command(request.command, request.workdir, request.run_dir),
            ],
            working_dir=WORKSPACE,
            # The working tree is read-only: bytecode caches go nowhere, HOME to the tmpfs.
            environment={"HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1", **request.env},
            mounts=mounts,
            network_mode="none",
            nano_cpus=round(config.cpus * 1e9) if config.cpus is not None else None,
            cpuset_cpus=config.cpuset_text,
            **self._hardening(read_only=True, job_id=request.job_id, ptrace=request.ptrace),
        )

    def _hardening(self, *, read_only: bool, job_id: int | None, ptrace: bool = False) -> dict:
        settings = self.settings
        return dict(
            name=f"lagtrace-{job_id if job_id is not None else 'x'}-{uuid.uuid4().hex[:10]}",
            labels={
                JOB_LABEL: str(job_id) if job_id is not None else "",
                OWNER_LABEL: self._owner,
                INSTALLATION_LABEL: settings.installation,
            },
            user=RUNNER_USER,
            read_only=read_only,
            tmpfs={"/tmp": f"rw,exec,nosuid,nodev,size={settings.docker_tmpfs_size}"},
            cap_drop=["ALL"],
            # Only for the evidence runs whose tool attaches to the command (Probe.ptrace):
            # a timing run's code gets no way to read or steer another process.
            cap_add=["SYS_PTRACE"] if ptrace else [],
            security_opt=["no-new-privileges"],  # and no seccomp option: the default profile
            mem_limit=settings.docker_memory,
            memswap_limit=settings.docker_memory,  # no swap: over the limit is an OOM kill
            pids_limit=settings.docker_pids_limit,
            # None: the engine's default parent.
            cgroup_parent=settings.docker_cgroup_parent,
        )

    def _run(self, container, request: RunRequest, watch: ScratchWatch) -> RunResult | None:
        # Looked up before the start (a container of its own the first time), so the
        # watcher gets its handle as soon as the command runs.
        wrappers = (self.tool_path("env"), self.tool_path("timeout")) if request.watcher is not None else (None, None)
        started = time.perf_counter()
        try:
            container.start()
        except APIError as exc:
            raise self._engine_refused(f"the run container for {request.config.label}", exc) from None
        backstop = None
        backstopped = threading.Event()

        def stop() -> None:
            backstopped.set()
            kill_container(container)

        if request.timeout_s is not None:
            backstop = threading.Timer(request.timeout_s + BACKSTOP_GRACE_S, stop)
            backstop.daemon = True
            backstop.start()
        watched: RunWatcher | None = None  # the watcher, once it was told the command started
        measured = None
        # The timer's stdout tells when the command started and when it ended; the stream
        # blocks without polling (and without a socket timeout) for as long as the run takes.
        stream = container.logs(stdout=True, stderr=False, stream=True, follow=True)
        try:
            watch.start(lambda: kill_container(container))
            with watch:
                for line in _lines(stream):
                    if line.startswith("pid ") and request.watcher is not None:
                        mounts = {RUN_DIR: request.run_dir, WORKSPACE: request.workdir}
                        handle = DockerProcessHandle(container, int(line[4:]), mounts, wrappers)
                        request.watcher.started(handle)
                        watched = request.watcher
                    elif line.startswith("{"):
                        measured = json.loads(line)
                        break
        finally:
            stream.close()
            if backstop is not None:
                backstop.cancel()
        host_wall_s = time.perf_counter() - started
        if watched is not None:
            # The container still runs (the timer lingers): tools can read what they took.
            watched.finished()
        if watch.stopped:
            return None  # over a cap of its scratch: run() says which, once it has counted it
        if measured is None:
            # The timer itself was killed (out of memory, by the backstop, or from outside
            # the command: a cancel, the engine restarting), or the stream broke off while
            # the run goes on (the engine's connection lost).
            try:
                container.wait(timeout=STREAM_END_WAIT_S)
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                pass  # still running, or the engine away: the reload below tells
        container.reload()
        state = container.attrs["State"]
        if measured is None:
            if state.get("Running"):
                raise EngineUnavailable(f"the Docker engine's stream of the run in {request.config.label} broke off")
            # The timer is the container's first process and non-dumpable: nothing inside it
            # may kill it, so a SIGKILL that was neither the OOM killer's nor the backstop's
            # came from outside. The engine answered the reload, so the attempt counts: a
            # cause that repeats ends after LAGTRACE_TASK_MAX_ATTEMPTS, never loops.
            if state.get("ExitCode") == 137 and not state.get("OOMKilled") and not backstopped.is_set():
                raise EngineUnavailable(
                    f"the run's container in {request.config.label} was killed from outside the command "
                    "(the Docker engine restarting, or a cancel)",
                    answered=True,
                )
        return self._result(request, measured, state, host_wall_s)

    def _result(self, request: RunRequest, measured: dict | None, state: dict, host_wall_s: float) -> RunResult:
        if measured is None:
            # No rusage without the timer; the host's clock (start-up included) is the
            # best there is.
            exit_code = state.get("ExitCode", 1)
            measured = {
                "wall_s": host_wall_s,
                "user_s": 0.0,
                "sys_s": 0.0,
                "max_rss_kb": 0,
                "voluntary_ctx_switches": 0,
                "involuntary_ctx_switches": 0,
                "exit_code": -(exit_code - 128) if exit_code > 128 else exit_code,
                "timed_out": request.timeout_s is not None and host_wall_s >= request.timeout_s,
                "throttling": None,
                "busy_cpu_s": None,
                "read_syscalls": None,
                "read_bytes": None,
                "oom_killed": False,
            }
        oom_killed = bool(measured["oom_killed"] or state.get("OOMKilled"))
        throttling = measured["throttling"] if request.config.cpus is not None else None
        busy = measured["busy_cpu_s"]  # [before, after]
        own_cpu_s = measured["user_s"] + measured["sys_s"]
        foreign_cpus = hostload.foreign_cpus(busy[0], busy[1], own_cpu_s, measured["wall_s"]) if busy else 0.0
        failed = measured["exit_code"] != 0 or measured["timed_out"]
        output = request.run_dir / "output.log"
        # lexists: never stat through what the container left (a link into /root raises
        # PermissionError for a worker that is not root).
        tail = _tail(output) if failed and os.path.lexists(output) else None
        if oom_killed:
            limit = self.settings.docker_memory
            note = f"lagtrace: the kernel's OOM killer stopped the run: memory above the limit of {limit}\n"
            tail = (tail or "") + note
        return RunResult(
            wall_s=measured["wall_s"],
            user_s=measured["user_s"],
            sys_s=measured["sys_s"],
            max_rss_kb=measured["max_rss_kb"],
            voluntary_ctx_switches=measured["voluntary_ctx_switches"],
            involuntary_ctx_switches=measured["involuntary_ctx_switches"],
            exit_code=measured["exit_code"],
            timed_out=measured["timed_out"],
            nr_periods=throttling[0] if throttling else None,
            nr_throttled=throttling[1] if throttling else None,
            throttled_s=throttling[2] if throttling else None,
            output_tail=tail,
            foreign_cpus=foreign_cpus,
            run_delay_s=_seconds_or_none(measured.get("run_delay_s")),
            read_syscalls=measured["read_syscalls"],
            read_bytes=measured["read_bytes"],
            oom_killed=oom_killed,
        )

    def _engine_refused(self, what: str, exc: APIError) -> LagtraceError:
        message = reason(exc)
        if "network" in message and "not found" in message:
            return BadInput(
                f"cannot start {what}: {message}; choose an existing network with "
                f"LAGTRACE_DOCKER_PREPARE_NETWORK (index, with LAGTRACE_PACKAGE_INDEX_URL)"
            )
        if exc.status_code is not None and 400 <= exc.status_code < 500:
            return BadInput(f"the Docker engine refused {what}: {message}")
        if engine_trouble(exc):
            return EngineUnavailable(f"the Docker engine failed to run {what}: {message}", answered=True)
        return LagtraceError(f"the Docker engine failed to run {what}: {message}")


def _seconds_or_none(value: object) -> float | None:
    """A number the container's timer printed, or None: a timer of an older image prints
    none, and what a container prints is read, not trusted."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 else None


def _lines(stream):
    """Lines of a chunked log stream."""
    buffer = b""
    for chunk in stream:
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            yield line.decode("utf-8", "replace")
    if buffer:
        yield buffer.decode("utf-8", "replace")


def timer_source() -> str:
    """The container's timer as one program for ``python3 -I -S -c``: the stall clock it
    imports is made a module under its own name first (lagtrace is not installed there)."""
    files = resources.files("services.measure.executors")
    clock = files.joinpath("stall_clock.py").read_text()
    timer = files.joinpath("container_timer.py").read_text()
    name = "services.measure.executors.stall_clock"
    return (
        "import sys, types\n"
        f"clock = types.ModuleType({name!r})\n"
        f"exec(compile({clock!r}, 'stall_clock.py', 'exec'), clock.__dict__)\n"
        f"sys.modules[{name!r}] = clock\n"
        "del sys, types, clock\n"
        f"{timer}"
    )


def _host_py_spy() -> str | None:
    """The static py-spy binary from lagtrace's own environment (the PyPI wheel ships one)."""
    beside_python = Path(sys.executable).parent / "py-spy"
    if beside_python.exists():
        return str(beside_python.resolve())
    found = shutil.which("py-spy")
    return str(Path(found).resolve()) if found else None
