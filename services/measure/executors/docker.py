"""The docker executor: each run in its own hardened container, measured from inside.

- CPU configuration: ``nano_cpus`` for a quota, ``cpuset_cpus`` for pinning.
- Hardening for untrusted test code: no network, read-only root with a tmpfs for
  scratch, every capability dropped except SYS_PTRACE (the evidence tools attach to the
  command), no-new-privileges, the engine's default seccomp profile, uid 1000, memory
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
  and the one-shot containers carry the job label too).
- Engine outages: whatever the engine does instead of answering (the socket refuses or
  resets, a read times out, a 5xx, a log stream that breaks off, a container killed from
  outside its command) raises ``EngineUnavailable``, never a failed run: the service waits
  the engine out (services/jobs/engine.py) and runs the step again.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import shutil
import socket
import stat
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from urllib.parse import urlsplit

import docker
import requests
import urllib3
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.types import Mount

from services.errors import BadInput, EngineUnavailable, LagtraceError
from services.measure import hostload
from services.measure.configs import parse_cpulist
from services.measure.executors import prepare_network
from services.measure.executors.base import RunRequest, RunResult, ToolResult
from services.measure.executors.local import _tail
from services.settings import Settings

JOB_LABEL = "lagtrace.job"
OWNER_LABEL = "lagtrace.owner"
INSTALLATION_LABEL = "lagtrace.installation"
DEPS_LABEL = "lagtrace.deps"
DEPS_REPOSITORY = "lagtrace-deps"
RUNNER_UID = 1000  # the runner image's non-root user; custom images keep this uid
RUNNER_USER = f"{RUNNER_UID}:{RUNNER_UID}"
# The image's own interpreter runs the timer, whatever virtualenv the job's PATH selects.
CONTAINER_PYTHON = "/usr/bin/python3"
TOOLS_DIR = "/lagtrace/tools"
# (image, program) -> its path on the image's PATH (None: not there). Images are immutable
# by id, so this holds for the life of the process; an incomplete answer is not kept.
_LOCATED: dict[tuple[str, str], str | None] = {}
DEPS_VENV = "/lagtrace/deps/venv"
# Where every run sees its checkout (read-only, the working directory) and its run_dir.
WORKSPACE = "/workspace"
RUN_DIR = "/lagtrace/run"
# /workspace/... where a tool reports a path: not inside another path (/x/workspace/...).
_WORKSPACE_PATH = re.compile(r"(?<![\w.~/-])" + re.escape(WORKSPACE) + "/")
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
IN_IMAGE_TOOLS = ("strace", "gdb", "gcore")
# Lock and requirements files whose content decides the prepared environment.
LOCK_FILE_GLOBS = ("requirements*.txt", "requirements/*.txt", "constraints*.txt")
MAX_LOCK_FILE_BYTES = 1024 * 1024
DEPS_SCOPE_LABEL = "lagtrace.deps.scope"
ENGINE_TIMEOUT_S = 30
BUILD_HINT = "build it with services/measure/executors/runner/build-offline.sh; lagtrace never pulls images"
# The timer kills the command at the timeout itself; the engine-side kill is the backstop
# for a timer that cannot (its container frozen or out of memory).
BACKSTOP_GRACE_S = 30.0
# How long a finished run's container waits for evidence tools before its timer exits,
# should lagtrace die before removing it (it is removed at once otherwise).
LINGER_S = 900
# The prepare script's last line, with the install's exit status: a container that exits
# without it was killed from outside (the shell is its first process, which nothing inside
# the container may kill), not by a failing install.
INSTALL_EXIT_MARK = "lagtrace-install-exit "
# After a run's log stream ends without the measurement: how long the container is given
# to exit before the stream is taken to have broken off with the run still going.
STREAM_END_WAIT_S = 10
# Waiting for an engine that went away: the first retry after 1 s, doubling up to this.
ENGINE_BACKOFF_MAX_S = 10.0


def connect(timeout_s: float = ENGINE_TIMEOUT_S) -> docker.DockerClient:
    """A client for the engine at DOCKER_HOST (or the local socket), or EngineUnavailable."""
    try:
        client = docker.from_env(timeout=timeout_s)
        client.ping()
    except (DockerException, requests.RequestException) as exc:
        raise EngineUnavailable(
            f"no Docker engine answers ({_reason(exc)}); start one or use --executor local"
        ) from None
    return client


def engine_trouble(exc: BaseException) -> bool:
    """The engine did not answer (refused, reset, timed out, a stream cut off) or failed
    with a server error: the environment, as opposed to a request it refused (4xx)."""
    if isinstance(exc, APIError):
        return exc.status_code is not None and exc.status_code >= 500
    if isinstance(
        exc,
        requests.ConnectionError
        | requests.Timeout
        | requests.exceptions.ChunkedEncodingError
        | urllib3.exceptions.HTTPError
        | http.client.HTTPException
        | ConnectionError,
    ):
        return True
    # docker.from_env wraps the first request's failure ("Error while fetching server API version").
    cause = exc.__cause__ or exc.__context__
    return isinstance(exc, DockerException) and cause is not None and engine_trouble(cause)


@contextmanager
def _engine_calls(what: str) -> Iterator[None]:
    """Engine trouble while doing ``what`` becomes EngineUnavailable (never the command's failure)."""
    try:
        yield
    except EngineUnavailable:
        raise
    except Exception as exc:
        if not engine_trouble(exc):
            raise
        answered = isinstance(exc, APIError)
        raise EngineUnavailable(
            f"the Docker engine was unavailable while {what} ({_reason(exc)})", answered=answered
        ) from None


def wait_for_engine(bound_s: float, progress: Callable[[str], None] = lambda m: None) -> bool:
    """Ping the engine with backoff until it answers (True) or ``bound_s`` has passed (False)."""
    deadline = time.monotonic() + bound_s
    pause = 1.0
    while True:
        try:
            connect(timeout_s=min(ENGINE_TIMEOUT_S, max(1.0, deadline - time.monotonic()))).close()
            return True
        except EngineUnavailable as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            progress(f"the Docker engine does not answer ({exc}); trying again in {min(pause, left):.0f} s")
            time.sleep(min(pause, left))
            pause = min(pause * 2, ENGINE_BACKOFF_MAX_S)


def unavailable_reason(image: str) -> str | None:
    """Why `--executor auto` cannot use docker, or None when it can."""
    try:
        client = connect()
    except EngineUnavailable as exc:
        return str(exc)
    try:
        client.images.get(image)
    except ImageNotFound:
        return f"the runner image {image} is not built ({BUILD_HINT})"
    except (DockerException, requests.RequestException) as exc:
        return f"the Docker engine failed to answer ({_reason(exc)})"
    finally:
        client.close()
    return None


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
        with _engine_calls("looking up the runner image"):
            try:
                self._image_id = self.client.images.get(self.image).id
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
        with _engine_calls("removing containers left by a killed lagtrace"):
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
            seen = self._one_shot(["sh", "-c", script], image=self.image).strip()
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
        with _engine_calls("installing the dependencies"):
            self._prepare(workdir, progress)

    def _prepare(self, workdir: Path, progress: Callable[[str], None]) -> None:
        _check_workdir(workdir)
        lock_files = sorted(
            {path for pattern in LOCK_FILE_GLOBS for path in workdir.glob(pattern) if _inside_tree(path, workdir)}
        )
        if not lock_files:
            return
        digest = hashlib.sha256(self._image_id.encode() + b"\0" + self.cache_scope.encode() + b"\0")
        for path in lock_files:
            content = read_regular_file(path, MAX_LOCK_FILE_BYTES)
            digest.update(str(path.relative_to(workdir)).encode() + b"\0" + content + b"\0")
        prepared = f"{DEPS_REPOSITORY}:{digest.hexdigest()[:16]}"
        names = ", ".join(str(path.relative_to(workdir)) for path in lock_files)
        try:
            self.client.images.get(prepared)
            progress(f"dependencies from {names}: cached in image {prepared}")
        except ImageNotFound:
            progress(f"installing dependencies from {names} (once; cached as image {prepared})")
            self._install(workdir, lock_files, prepared)
        self.run_image = prepared
        self._tools.clear()

    def _install(self, workdir: Path, lock_files: list[Path], prepared: str) -> None:
        # As the prepare container sees them: the tree is mounted at /workspace.
        inside = {path: f"{WORKSPACE}/{path.relative_to(workdir)}" for path in lock_files}
        requirements = [a for p in lock_files if p.name.startswith("requirements") for a in ("-r", inside[p])]
        constraints = [a for p in lock_files if p.name.startswith("constraints") for a in ("-c", inside[p])]
        # --system-site-packages keeps the image's Debian pytest importable beside the venv.
        script = (
            f"({CONTAINER_PYTHON} -m venv --system-site-packages {DEPS_VENV} "
            f'&& {DEPS_VENV}/bin/pip install --no-input --disable-pip-version-check "$@"); '
            f'code=$?; echo "{INSTALL_EXIT_MARK}$code"; exit $code'
        )
        # Built from scratch: the install runs the repository's own code (setup.py, build
        # backends), so nothing of the worker's environment (index credentials, proxies,
        # tokens) goes in; the operator may name one index without credentials.
        environment = {"HOME": "/tmp", "PIP_NO_INPUT": "1"}
        if self.settings.package_index_url:
            environment["PIP_INDEX_URL"] = self.settings.package_index_url
            parts = urlsplit(self.settings.package_index_url)
            if parts.scheme == "http":
                # pip ignores a plain-http index unless told to trust it: an index inside
                # the cluster, which the operator named and the sealed network leads to.
                environment["PIP_TRUSTED_HOST"] = parts.netloc
        network = self.settings.docker_prepare_network
        if network == "index":
            # The sealed network: the index (through its relay) and nothing else.
            network = prepare_network.ensure(self.client, self.settings, self._image_id)
        mounts = [Mount(WORKSPACE, str(workdir), type="bind", read_only=True)]
        try:
            container = self.client.containers.create(
                self.image,
                ["sh", "-c", script, "prepare", *requirements, *constraints],
                working_dir=WORKSPACE,
                environment=environment,
                mounts=mounts,
                network_mode=network,
                # The root stays writable here: the install writes the venv into the image.
                **self._hardening(read_only=False, job_id=self.job_id),
            )
        except APIError as exc:
            raise self._engine_refused("the prepare container", exc) from None
        try:
            try:
                container.start()
            except APIError as exc:
                raise self._engine_refused("the prepare container", exc) from None
            timeout = self.settings.docker_prepare_timeout_s
            started = time.monotonic()
            try:
                status = container.wait(timeout=timeout)
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError) as exc:
                if time.monotonic() - started < timeout:
                    # Before the timeout: the engine went away, not the install's time.
                    raise EngineUnavailable(
                        f"the Docker engine was unavailable while installing the dependencies ({_reason(exc)})"
                    ) from None
                # docker-py reports a wait that ran out of time as a read timeout.
                _kill(container)
                raise LagtraceError(
                    f"installing the dependencies took more than {timeout:g} s (LAGTRACE_DOCKER_PREPARE_TIMEOUT_S)"
                ) from None
            if status.get("StatusCode") != 0:
                log = container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
                lines = log.splitlines()
                if not any(line.startswith(INSTALL_EXIT_MARK) for line in lines):
                    container.reload()
                    if not container.attrs["State"].get("OOMKilled"):
                        raise EngineUnavailable(
                            "the dependency install's container was killed from outside the install "
                            "(the Docker engine restarting, or a cancel)"
                        )
                tail = "\n".join(line for line in lines[-21:] if not line.startswith(INSTALL_EXIT_MARK))
                raise LagtraceError(f"installing the dependencies failed (exit {status.get('StatusCode')}):\n{tail}")
            base = self.client.images.get(self.image).attrs["Config"]
            env = [item for item in base.get("Env") or [] if not item.startswith(("PATH=", "VIRTUAL_ENV="))]
            container.commit(
                repository=prepared.split(":")[0],
                tag=prepared.split(":")[1],
                conf={
                    "Env": [*env, f"PATH={DEPS_VENV}/bin:{IMAGE_PATH}", f"VIRTUAL_ENV={DEPS_VENV}"],
                    "Cmd": [CONTAINER_PYTHON],
                    "User": RUNNER_USER,
                    "WorkingDir": base.get("WorkingDir") or "/",
                    "Labels": {
                        **(base.get("Labels") or {}),
                        DEPS_LABEL: prepared.split(":")[1],
                        DEPS_SCOPE_LABEL: self.cache_scope,
                    },
                },
            )
        finally:
            _remove(container)

    def check_command(self, command: list[str], workdir: Path) -> None:
        if not command:
            raise BadInput("no command given: write it after --, e.g. lagtrace run -- python3 prog.py")
        _check_workdir(workdir)
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
            with _engine_calls("looking for the command in the image"):
                found = self._locate([program])[program]
            if found is not None:
                return
            where = "no such file" if "/" in program else "not found on PATH"
            raise BadInput(f"cannot execute {program!r}: {where} in the image {self.run_image}")

    def _locate(self, programs: list[str]) -> dict[str, str | None]:
        """Where programs are on the run image's PATH, from one short hardened container
        (about 0.3 s here, on every job's way to its first run: remembered per image)."""
        # By content: the base image's id, or a prepared image's name (a digest of it).
        image = self._image_id if self.run_image == self.image else self.run_image
        missing = [program for program in programs if (image, program) not in _LOCATED]
        if missing:
            script = 'for p in "$@"; do command -v "$p" || echo -; done'
            found = self._one_shot(["sh", "-c", script, "locate", *missing]).splitlines()
            answers = {
                program: (found[i] if i < len(found) and found[i] != "-" else None) for i, program in enumerate(missing)
            }
            if len(found) != len(missing):
                return {program: _LOCATED.get((image, program), answers.get(program)) for program in programs}
            _LOCATED.update({(image, program): where for program, where in answers.items()})
        return {program: _LOCATED[(image, program)] for program in programs}

    def _one_shot(self, argv: list[str], image: str | None = None) -> str:
        # create/start/wait rather than containers.run(remove=True): a cancel (Ctrl-C,
        # SIGTERM) in the middle must still remove the container.
        image = image or self.run_image
        try:
            container = self.client.containers.create(
                image,
                argv,
                network_mode="none",
                **self._hardening(read_only=True, job_id=self.job_id),
            )
        except APIError as exc:
            raise self._engine_refused(f"a container of {image}", exc) from None
        try:
            container.start()
            container.wait(timeout=None)
            return container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
        except APIError as exc:
            raise self._engine_refused(f"a container of {image}", exc) from None
        finally:
            _remove(container)

    # -- paths and tools ---------------------------------------------------------------

    def visible_path(self, run_dir: Path, name: str = "") -> str:
        return f"{RUN_DIR}/{name}" if name else RUN_DIR

    def repository_paths(self, text: str) -> str:
        return _WORKSPACE_PATH.sub("", text)

    def tool_path(self, name: str) -> str | None:
        if name == "py-spy":
            return f"{TOOLS_DIR}/py-spy" if self._py_spy else None
        if name not in self._tools:
            with _engine_calls("looking for the evidence tools in the image"):
                self._tools.update(self._locate(sorted({*IN_IMAGE_TOOLS, name})))
        return self._tools[name]

    # -- one run -----------------------------------------------------------------------

    def run(self, request: RunRequest) -> RunResult:
        _give_to_runner(request.run_dir)
        with _engine_calls(f"running {request.config.label}"):
            try:
                container = self.client.containers.create(self.run_image, **self._run_kwargs(request))
            except APIError as exc:
                raise self._engine_refused(f"the run container for {request.config.label}", exc) from None
            try:
                return self._run(container, request)
            finally:
                # Also on timeout, on Ctrl-C (cancel) and when a watcher raises.
                _remove(container)
                # Only now, with no process of the job left to plant another, is what the
                # container wrote safe to open: links and special files are removed first.
                disarm_run_dir(request.run_dir)

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
                _timer_source(),
                output,
                timeout,
                str(LINGER_S),
                "none" if request.stall_clock is None else json.dumps(request.stall_clock),
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
            **self._hardening(read_only=True, job_id=request.job_id),
        )

    def _hardening(self, *, read_only: bool, job_id: int | None) -> dict:
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
            cap_add=["SYS_PTRACE"],
            security_opt=["no-new-privileges"],  # and no seccomp option: the default profile
            mem_limit=settings.docker_memory,
            memswap_limit=settings.docker_memory,  # no swap: over the limit is an OOM kill
            pids_limit=settings.docker_pids_limit,
            # None: the engine's default parent.
            cgroup_parent=settings.docker_cgroup_parent,
        )

    def _run(self, container, request: RunRequest) -> RunResult:
        started = time.perf_counter()
        try:
            container.start()
        except APIError as exc:
            raise self._engine_refused(f"the run container for {request.config.label}", exc) from None
        backstop = None
        backstopped = threading.Event()

        def stop() -> None:
            backstopped.set()
            _kill(container)

        if request.timeout_s is not None:
            backstop = threading.Timer(request.timeout_s + BACKSTOP_GRACE_S, stop)
            backstop.daemon = True
            backstop.start()
        watched = False
        measured = None
        # The timer's stdout tells when the command started and when it ended; the stream
        # blocks without polling (and without a socket timeout) for as long as the run takes.
        stream = container.logs(stdout=True, stderr=False, stream=True, follow=True)
        try:
            for line in _lines(stream):
                if line.startswith("pid ") and request.watcher is not None:
                    mounts = {RUN_DIR: request.run_dir, WORKSPACE: request.workdir}
                    handle = DockerProcessHandle(container, int(line[4:]), mounts)
                    request.watcher.started(handle)
                    watched = True
                elif line.startswith("{"):
                    measured = json.loads(line)
                    break
        finally:
            stream.close()
            if backstop is not None:
                backstop.cancel()
        host_wall_s = time.perf_counter() - started
        if watched:
            # The container still runs (the timer lingers): tools can read what they took.
            request.watcher.finished()
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
            # The timer is the container's first process: nothing inside it may kill it,
            # so a SIGKILL that was neither the OOM killer's nor the backstop's came from outside.
            if state.get("ExitCode") == 137 and not state.get("OOMKilled") and not backstopped.is_set():
                raise EngineUnavailable(
                    f"the run's container in {request.config.label} was killed from outside the command "
                    "(the Docker engine restarting, or a cancel)"
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
        busy = measured["busy_cpu_s"]
        own_cpu_s = measured["user_s"] + measured["sys_s"]
        foreign_cpus = hostload.foreign_cpus(*busy, own_cpu_s, measured["wall_s"]) if busy else 0.0
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
            read_syscalls=measured["read_syscalls"],
            read_bytes=measured["read_bytes"],
            oom_killed=oom_killed,
        )

    def _engine_refused(self, what: str, exc: APIError) -> LagtraceError:
        message = _reason(exc)
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


class DockerProcessHandle:
    """The running command as the evidence tools see it: tools run via `docker exec`."""

    def __init__(self, container, pid: int, mounts: dict[str, Path]):
        self.container = container
        self.pid = pid
        self._mounts = mounts  # container path -> the host directory mounted there

    def run_tool(self, argv: list[str], timeout_s: float | None = None) -> ToolResult:
        # coreutils' timeout kills the tool inside the container; exec has no timeout of its own.
        command = argv if timeout_s is None else ["timeout", "-s", "KILL", f"{timeout_s:g}", *argv]
        started = time.perf_counter()
        try:
            code, (stdout, stderr) = self.container.exec_run(command, user=RUNNER_USER, demux=True)
        except (DockerException, requests.RequestException) as exc:
            return ToolResult(
                127, "", f"cannot run {argv[0]} in the container: {_reason(exc)}", time.perf_counter() - started
            )
        out = (stdout or b"").decode("utf-8", "replace")
        err = (stderr or b"").decode("utf-8", "replace")
        if timeout_s is not None and code == 137:
            code, err = -9, err + f"\ntimed out after {timeout_s} s"
        return ToolResult(code, out, err, time.perf_counter() - started)

    def copy_out(self, path: str, host_path: Path) -> None:
        inside = Path(os.path.normpath(path))
        for mount, host_dir in self._mounts.items():
            if inside.is_relative_to(mount):
                # Written through a mount: already on the host.
                source = host_dir / inside.relative_to(mount)
                if source != host_path:
                    shutil.move(source, host_path)
                return
        stream, _ = self.container.get_archive(path)
        # The archive holds the one file; spool it beside its destination (cores are large).
        with tempfile.TemporaryFile(dir=host_path.parent) as spool:
            for chunk in stream:
                spool.write(chunk)
            spool.seek(0)
            with tarfile.open(fileobj=spool) as archive:
                member = next((m for m in archive.getmembers() if m.isfile()), None)
                if member is None:
                    raise LagtraceError(f"{path} in the container is not a regular file")
                with archive.extractfile(member) as data, _create_exclusively(host_path) as target:
                    shutil.copyfileobj(data, target)


def _create_exclusively(host_path: Path):
    """A new regular file at ``host_path``, never through whatever the container put there.

    The run_dir is the container's to write while it runs: an entry of that name may be a
    link to a host file (a `.pth` in site-packages runs code at the next interpreter start).
    """
    try:
        host_path.unlink()
    except FileNotFoundError:
        pass
    # O_EXCL with O_CREAT fails on any existing entry, a link planted since included.
    fd = os.open(host_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    return os.fdopen(fd, "wb")


def disarm_run_dir(run_dir: Path) -> list[str]:
    """Remove every link, FIFO, socket and device below ``run_dir``; return what went.

    Called once the container is gone. Afterwards every name under run_dir is a plain
    file or directory of the run's own, so the probes and the artifact store may open
    them by name. Nothing is followed while walking (scandir reports the entry itself).
    """
    removed: list[str] = []
    pending = [run_dir]
    while pending:
        directory = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            mode = entry.stat(follow_symlinks=False).st_mode
            if stat.S_ISDIR(mode):
                pending.append(Path(entry.path))
            elif not stat.S_ISREG(mode):
                try:
                    os.unlink(entry.path)
                except OSError as exc:
                    # A worker that is not root cannot unlink in a directory the container
                    # made: the run is unusable rather than read through the link.
                    raise LagtraceError(
                        f"the run left {entry.path}, which is not a regular file and cannot be removed ({exc})"
                    ) from None
                removed.append(os.path.relpath(entry.path, run_dir))
    return removed


def read_regular_file(path: Path, max_bytes: int) -> bytes:
    """A regular file's content, not through a link and at most ``max_bytes``; else BadInput."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise BadInput(f"{path.name}: cannot be read ({exc.strerror}; links are not followed)") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BadInput(f"{path.name}: not a regular file")
        if info.st_size > max_bytes:
            raise BadInput(f"{path.name}: {info.st_size} bytes, more than the {max_bytes} read")
        return handle.read(max_bytes + 1)[:max_bytes]


def _inside_tree(path: Path, tree: Path) -> bool:
    """A regular file, reached without a link, that is really inside ``tree``."""
    if path.is_symlink() or not path.is_file():
        return False
    return path.resolve().is_relative_to(tree.resolve())


def reap_orphans(client: docker.DockerClient, installation: str) -> list[str]:
    """Remove this installation's containers whose lagtrace process on this host no longer exists.

    Containers of lagtrace processes that are alive (other jobs on this node), of other
    hosts sharing the engine, and of other installations (another lagtrace, say a staging
    one, on the same engine) are left alone.
    """
    host = socket.gethostname()
    removed = []
    mine = {"label": [OWNER_LABEL, f"{INSTALLATION_LABEL}={installation}"]}
    for container in client.containers.list(all=True, filters=mine):
        owner_host, _, process = container.labels.get(OWNER_LABEL, "").partition(":")
        pid, _, start_time = process.partition(":")
        if owner_host != host or not pid.isdigit():
            continue
        if _start_time(int(pid)) == start_time:
            continue
        _remove(container)
        removed.append(container.name)
    return removed


def stop_job_containers(settings: Settings, job_id: int) -> list[str]:
    """Kill the running containers of one job of this installation (a cancelled job): the
    run ends at once, its container is then removed by the run that started it."""
    try:
        client = docker.from_env(timeout=ENGINE_TIMEOUT_S)
    except (DockerException, requests.RequestException):
        return []  # no engine here: nothing of ours can be running on it
    labels = [f"{JOB_LABEL}={job_id}", f"{INSTALLATION_LABEL}={settings.installation}"]
    stopped = []
    try:
        for container in client.containers.list(filters={"label": labels, "status": "running"}):
            _kill(container)
            stopped.append(container.name)
    except (DockerException, requests.RequestException):
        pass  # the engine is busy: the next heartbeat tries again
    finally:
        client.close()
    return stopped


def remove_own_containers(settings: Settings, job_id: int) -> list[str]:
    """Remove this process's containers of one job: what an attempt the engine interrupted
    left (its removal failed while the engine was away), before the step runs again."""
    labels = [f"{JOB_LABEL}={job_id}", f"{INSTALLATION_LABEL}={settings.installation}", f"{OWNER_LABEL}={owner_id()}"]
    removed = []
    try:
        client = docker.from_env(timeout=ENGINE_TIMEOUT_S)
        try:
            for container in client.containers.list(all=True, filters={"label": labels}):
                _remove(container)
                removed.append(container.name)
        finally:
            client.close()
    except (DockerException, requests.RequestException):
        pass  # away again: the reaper of this installation gets them once this process ends
    return removed


def owner_id(pid: int | None = None) -> str:
    """This process as the reaper identifies it: pids are reused, pid + start time are not."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{_start_time(pid)}"


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22, counted after the command name, which may itself contain spaces.
    return stat.rsplit(")", 1)[1].split()[19]


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


def _timer_source() -> str:
    return resources.files("services.measure.executors").joinpath("container_timer.py").read_text()


def _give_to_runner(run_dir: Path) -> None:
    """Let the container's uid 1000 write the run's files (output, JUnit XML, evidence)."""
    if os.geteuid() == 0:
        os.chown(run_dir, RUNNER_UID, RUNNER_UID)
    else:
        os.chmod(run_dir, 0o777)


def container_command(command: list[str], workdir: Path, run_dir: Path) -> list[str]:
    """The command as the container runs it: an argument naming a host path under the
    run_dir or the working tree (``/srv/co/x.py``, ``--rootdir=/srv/co``) names the same
    file at its mount. The run_dir first: a test's run_dir may sit inside the tree."""
    mounts = [(run_dir.as_posix(), RUN_DIR), (workdir.as_posix(), WORKSPACE)]
    translated = []
    for argument in command:
        option, equals, value = argument.partition("=") if argument.startswith("-") else ("", "", argument)
        for host, inside in mounts:
            if host != "/" and (value == host or value.startswith(host + "/")):
                value = inside + value[len(host) :]
                break
        translated.append(option + equals + value)
    return translated


def _check_workdir(workdir: Path) -> None:
    """What no mount can fix: the tree is mounted as it is, so its own mode is what the
    container's user meets (its parents, a home of mode 0700 say, are never walked)."""
    if not workdir.is_dir():
        raise BadInput(f"working directory {workdir} does not exist")
    mode = workdir.stat()
    if mode.st_uid != RUNNER_UID and (mode.st_mode & 0o005) != 0o005:
        raise BadInput(
            f"working directory {workdir} is not readable by the container's user (uid {RUNNER_UID}); "
            f"make it so with chmod o+rx"
        )


def _host_py_spy() -> str | None:
    """The static py-spy binary from lagtrace's own environment (the PyPI wheel ships one)."""
    beside_python = Path(sys.executable).parent / "py-spy"
    if beside_python.exists():
        return str(beside_python.resolve())
    found = shutil.which("py-spy")
    return str(Path(found).resolve()) if found else None


def _kill(container) -> None:
    try:
        container.kill()
    except (DockerException, requests.RequestException):
        pass  # already gone: nothing left to stop


# A removal can fail for a moment: overlay2's "device or resource busy" leaves the
# container dead, a busy engine answers late, another removal is under way (409).
REMOVE_ATTEMPTS = 4


def _remove(container) -> None:
    for attempt in range(REMOVE_ATTEMPTS):
        try:
            container.remove(force=True)
            return
        except NotFound:
            return
        except (DockerException, requests.RequestException):
            # Retried here because no later lagtrace process may reap it (a CLI run is
            # the last of its database); past the last attempt the reaper gets it.
            if attempt + 1 < REMOVE_ATTEMPTS:
                time.sleep(0.5 * 2**attempt)


def _reason(exc: Exception) -> str:
    explanation = getattr(exc, "explanation", None)
    if explanation:
        return str(explanation)
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
