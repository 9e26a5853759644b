"""The running command as the evidence tools see it in the docker executor: each tool runs
with `docker exec` inside the run's container, and what it writes is brought out without
ever opening what the container planted on the host (docker_guards.create_exclusively)."""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
import time
from pathlib import Path

import requests
from docker.errors import DockerException

from services.errors import LagtraceError
from services.measure.executors.base import ToolResult
from services.measure.executors.docker_engine import reason
from services.measure.executors.docker_guards import RUNNER_USER, create_exclusively


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
                127, "", f"cannot run {argv[0]} in the container: {reason(exc)}", time.perf_counter() - started
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
                data = archive.extractfile(member)
                if data is None:  # only for what is not a regular file, excluded above
                    raise LagtraceError(f"{path} in the container is not a regular file")
                with data, create_exclusively(host_path) as target:
                    shutil.copyfileobj(data, target)
