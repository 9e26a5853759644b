"""The docker executor's look-ups: where a program is on the run image's PATH (the job's
command), and where lagtrace's own tools are in the base image (never the job's venv),
each from one short hardened container and remembered per image
(tests/security/test_tool_paths.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import requests
from docker.errors import APIError, DockerException
from docker.types import Mount

from services.errors import LagtraceError
from services.measure.executors.docker_exec import TOOL_ENV
from services.measure.executors.docker_guards import (
    CONTAINER_PYTHON,
    RUN_DIR,
    closed_dirs,
    kill_container,
    remove_container,
)

if TYPE_CHECKING:
    from services.measure.executors.docker import DockerExecutor

# (image, program) -> its path on the image's PATH (None: not there); (image, "tool:" +
# name) -> a tool's path in the base image. Images are immutable by id, so this holds for
# the life of the process; an incomplete answer is not kept.
_LOCATED: dict[tuple[str, str], str | None] = {}
# lagtrace's own shell in every container it starts, by path: the engine would resolve a
# bare "sh" on the image's PATH, which in a prepared image starts with the job's venv.
SHELL = "/bin/sh"
# A tool is the first executable file of its name in a directory of lagtrace's own PATH:
# not `command -v`, which answers a builtin's bare name (kill) for the PATH to resolve.
_FIND_TOOLS = (
    'for p in "$@"; do found=-; IFS=:; for d in $PATH; do '
    'if [ -f "$d/$p" ] && [ -x "$d/$p" ]; then found="$d/$p"; break; fi; done; unset IFS; echo "$found"; done'
)
# How long a look-up container may take (about 0.3 s here) before it is stopped.
ONE_SHOT_TIMEOUT_S = 60.0


def locate(executor: DockerExecutor, programs: list[str]) -> dict[str, str | None]:
    """Where programs are on the run image's PATH, from one short hardened container
    (about 0.3 s here, on every job's way to its first run: remembered per image)."""
    # By content: the base image's id, or a prepared image's name (a digest of it).
    image = executor._image_id if executor.run_image == executor.image else executor.run_image
    missing = [program for program in programs if (image, program) not in _LOCATED]
    if missing:
        script = 'for p in "$@"; do command -v "$p" || echo -; done'
        # The command's own look-up: the job's PATH (its venv first) is the one it runs with.
        found = one_shot(executor, [SHELL, "-c", script, "locate", *missing]).splitlines()
        answers = {
            program: (found[i] if i < len(found) and found[i] != "-" else None) for i, program in enumerate(missing)
        }
        if len(found) != len(missing):
            return {program: _LOCATED.get((image, program), answers.get(program)) for program in programs}
        _LOCATED.update({(image, program): where for program, where in answers.items()})
    return {program: _LOCATED[(image, program)] for program in programs}


def locate_tools(executor: DockerExecutor, names: list[str]) -> dict[str, str | None]:
    """Where lagtrace's tools are: in the base image (the job's install, as uid 1000,
    can add to its venv but not replace the image's own files), searched on lagtrace's
    own PATH, never the prepared image's venv-first one (tests/security/test_tool_paths.py)."""
    missing = [name for name in names if (executor._image_id, "tool:" + name) not in _LOCATED]
    if missing:
        found = one_shot(
            executor, [SHELL, "-c", _FIND_TOOLS, "locate", *missing], image=executor.image, environment=TOOL_ENV
        ).splitlines()
        if len(found) == len(missing):
            _LOCATED.update(
                {
                    (executor._image_id, "tool:" + name): (where if where != "-" else None)
                    for name, where in zip(missing, found, strict=True)
                }
            )
        else:
            return {name: None for name in names}
    return {name: _LOCATED[(executor._image_id, "tool:" + name)] for name in names}


# Every directory below the run directory opened to all (mode 0777), each before it is
# listed, as the container's uid 1000, their owner; by the base image's own interpreter.
_OPEN_DIRS = """
import os, sys
pending = [sys.argv[1]]
while pending:
    directory = pending.pop()
    try:
        os.chmod(directory, 0o777)
    except OSError:
        pass  # not uid 1000's (the run directory itself, the worker's): open to it already
    try:
        with os.scandir(directory) as listing:
            pending += [entry.path for entry in listing if entry.is_dir(follow_symlinks=False)]
    except OSError:
        pass
"""


def open_run_dir(executor: DockerExecutor, run_dir: Path) -> None:
    """Open what the run closed to a worker that is not root (``closed_dirs``), so that
    its directory can be counted against its caps and removed: left closed, a run's
    directory of mode 0700 hid what it wrote from the caps and stayed on the disk after
    its step (tests/security/test_non_root_worker.py). One short container, only then."""
    if not closed_dirs(run_dir):
        return
    try:
        one_shot(
            executor,
            [CONTAINER_PYTHON, "-I", "-S", "-c", _OPEN_DIRS, RUN_DIR],
            image=executor.image,
            environment=TOOL_ENV,
            mounts=[Mount(RUN_DIR, str(run_dir), type="bind", read_only=False)],
        )
    except (LagtraceError, DockerException, requests.RequestException):
        pass  # the engine is away: what stays closed is counted as the file system's loss


def one_shot(
    executor: DockerExecutor,
    argv: list[str],
    image: str | None = None,
    environment: dict[str, str] | None = None,
    mounts: list[Mount] | None = None,
) -> str:
    # create/start/wait rather than containers.run(remove=True): a cancel (Ctrl-C,
    # SIGTERM) in the middle must still remove the container.
    image = image or executor.run_image
    try:
        container = executor.client.containers.create(
            image,
            argv,
            network_mode="none",
            environment=environment,
            mounts=mounts or [],
            **executor._hardening(read_only=True, job_id=executor.job_id),
        )
    except APIError as exc:
        raise executor._engine_refused(f"a container of {image}", exc) from None
    try:
        container.start()
        started = time.monotonic()
        try:
            container.wait(timeout=ONE_SHOT_TIMEOUT_S)
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
            if time.monotonic() - started < ONE_SHOT_TIMEOUT_S:
                raise  # the engine went away: engine_calls says so
            kill_container(container)
            raise LagtraceError(
                f"a look-up container of {image} ({argv[0]}) did not end within {ONE_SHOT_TIMEOUT_S:g} s"
            ) from None
        return container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
    except APIError as exc:
        raise executor._engine_refused(f"a container of {image}", exc) from None
    finally:
        remove_container(container)
