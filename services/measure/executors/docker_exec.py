"""The running command as the evidence tools see it in the docker executor: each tool runs
with `docker exec` inside the run's container, and what it writes is brought out without
ever opening what the container planted on the host (docker_guards.create_exclusively).

Nothing of the job's is on a tool's way: the tool, ``env`` and ``timeout`` are named by
their paths in the runner image (docker.py ``tool_path``, never looked up on the job's
venv-first PATH), and the tool starts from an environment of lagtrace's own (``TOOL_ENV``)
rather than the container's. Every exec has a deadline: ``timeout`` kills the tool inside
the container, and the worker stops waiting a little later whatever the exec does
(docs/guides/security.md, tests/security/test_tool_paths.py).
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
import threading
import time
from pathlib import Path

import requests
from docker.errors import DockerException

from services.errors import LagtraceError
from services.measure.executors.base import ToolResult
from services.measure.executors.docker_engine import reason
from services.measure.executors.docker_guards import RUNNER_USER, create_exclusively
from services.measure.executors.docker_prepare import IMAGE_PATH

# What every tool lagtrace runs in a job's container starts from: the image's own PATH
# (the prepared image puts the job's venv first), nothing of the run's environment.
TOOL_ENV = {"PATH": IMAGE_PATH, "HOME": "/tmp", "LANG": "C.UTF-8"}
# A tool run without a timeout of its own gets this one.
DEFAULT_TOOL_TIMEOUT_S = 300.0
# How long after a tool's timeout the worker stops waiting for its exec, should the
# in-container ``timeout`` not end it (stopped, or the engine slow to answer).
EXEC_GRACE_S = 10.0


class DockerProcessHandle:
    """The running command as the evidence tools see it: tools run via `docker exec`."""

    def __init__(self, container, pid: int, mounts: dict[str, Path], wrappers: tuple[str | None, str | None]):
        self.container = container
        self.pid = pid
        self._mounts = mounts  # container path -> the host directory mounted there
        # The image's env(1) and timeout(1), by path (None: the image has none).
        self._env, self._timeout = wrappers

    def run_tool(self, argv: list[str], timeout_s: float | None = None) -> ToolResult:
        timeout_s = DEFAULT_TOOL_TIMEOUT_S if timeout_s is None else timeout_s
        started = time.perf_counter()
        if self._env is None or self._timeout is None:
            missing = "env" if self._env is None else "timeout"
            return ToolResult(127, "", f"cannot run {argv[0]} in the container: the image has no {missing}", 0.0)
        # env -i: the container's environment is the job's (its PATH, its PYTHONPATH): a
        # tool gets lagtrace's own. timeout(1) kills the tool inside the container.
        assignments = [f"{key}={value}" for key, value in TOOL_ENV.items()]
        command = [self._env, "-i", *assignments, self._timeout, "-s", "KILL", f"{timeout_s:g}", *argv]
        done: list[tuple[int | None, tuple[bytes | None, bytes | None]]] = []
        failed: list[BaseException] = []

        def call() -> None:
            try:
                done.append(self.container.exec_run(command, user=RUNNER_USER, demux=True))
            except (DockerException, requests.RequestException, OSError) as exc:
                failed.append(exc)

        # A thread, so that the worker's wait has a deadline of its own: the exec's stream
        # ends when the tool does, or when the container is removed at the run's end.
        caller = threading.Thread(target=call, daemon=True, name=f"exec {os.path.basename(argv[0])}")
        caller.start()
        caller.join(timeout_s + EXEC_GRACE_S)
        if failed:
            message = f"cannot run {argv[0]} in the container: {reason(failed[0])}"  # type: ignore[arg-type]
            return ToolResult(127, "", message, time.perf_counter() - started)
        if not done:
            return ToolResult(
                -9, "", f"timed out after {timeout_s} s (the exec did not end)", time.perf_counter() - started
            )
        code, (stdout, stderr) = done[0]
        out = (stdout or b"").decode("utf-8", "replace")
        err = (stderr or b"").decode("utf-8", "replace")
        if code == 137:
            code, err = -9, err + f"\ntimed out after {timeout_s} s"
        return ToolResult(code if code is not None else -9, out, err, time.perf_counter() - started)

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
                data = archive.extractfile(member)
                if data is None:  # only for what is not a regular file, excluded above
                    raise LagtraceError(f"{path} in the container is not a regular file")
                with data, create_exclusively(host_path) as target:
                    shutil.copyfileobj(data, target)
