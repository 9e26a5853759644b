"""The docker executor's prepare: the working tree's requirements installed once, into an
image cached by their hash (and the base image's id, and the project's scope).

Measured runs then start from that image with everything installed and no network. The
install runs the repository's own code (setup.py, build backends) in a hardened container
of its own, on the network the operator chose (LAGTRACE_DOCKER_PREPARE_NETWORK).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import requests
from docker.errors import APIError, ImageNotFound
from docker.types import Mount

from services.errors import BadInput, EngineUnavailable, LagtraceError
from services.measure.executors import prepare_network
from services.measure.executors.docker_engine import reason
from services.measure.executors.docker_guards import (
    CONTAINER_PYTHON,
    RUNNER_USER,
    WORKSPACE,
    check_workdir,
    inside_tree,
    kill_container,
    read_regular_file,
    remove_container,
)

if TYPE_CHECKING:
    from services.measure.executors.docker import DockerExecutor

DEPS_LABEL = "lagtrace.deps"
DEPS_REPOSITORY = "lagtrace-deps"
DEPS_SCOPE_LABEL = "lagtrace.deps.scope"
DEPS_VENV = "/lagtrace/deps/venv"
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Lock and requirements files whose content decides the prepared environment.
LOCK_FILE_GLOBS = ("requirements*.txt", "requirements/*.txt", "constraints*.txt")
MAX_LOCK_FILE_BYTES = 1024 * 1024
# The prepare script's last line, with the install's exit status: a container that exits
# without it was killed from outside (the shell is its first process, which nothing inside
# the container may kill), not by a failing install. The script writes a newline before it,
# so output the install left without one (a build backend writing to /proc/1/fd/1) cannot
# hide it (tests/security/test_measurement_channel.py).
INSTALL_EXIT_MARK = "lagtrace-install-exit "


def prepare_dependencies(executor: DockerExecutor, workdir: Path, progress: Callable[[str], None]) -> str | None:
    """The prepared image for the working tree's requirements (built now unless cached), or None."""
    check_workdir(workdir)
    lock_files = sorted(
        {path for pattern in LOCK_FILE_GLOBS for path in workdir.glob(pattern) if inside_tree(path, workdir)}
    )
    if not lock_files:
        return None
    base = executor._image_id.encode() + b"\0" + executor.cache_scope.encode() + b"\0"
    prepared = f"{DEPS_REPOSITORY}:{dependency_key(base, workdir, lock_files)}"
    names = ", ".join(str(path.relative_to(workdir)) for path in lock_files)
    try:
        executor.client.images.get(prepared)
        progress(f"dependencies from {names}: cached in image {prepared}")
    except ImageNotFound:
        progress(f"installing dependencies from {names} (once; cached as image {prepared})")
        install(executor, workdir, lock_files, prepared)
    return prepared


def dependency_key(base: bytes, workdir: Path, lock_files: list[Path]) -> str:
    """The prepared image's tag: the lock files' content, and what they install from the
    tree itself (``local_references``), so a changed local package is installed again
    rather than served stale from the cache (tests/unit/services/measure/test_dependency_key.py)."""
    digest = hashlib.sha256(base)
    for path in lock_files:
        content = read_regular_file(path, MAX_LOCK_FILE_BYTES)
        digest.update(str(path.relative_to(workdir)).encode() + b"\0" + content + b"\0")
        for reference, editable in local_references(content.decode("utf-8", "replace")):
            target = (workdir / reference).resolve()
            if not target.is_relative_to(workdir.resolve()):
                continue  # outside the tree: not mounted, the install fails and says so
            digest.update(f"{reference}\0{editable}\0".encode())
            _hash_local(digest, target, editable)
    return digest.hexdigest()[:16]


# A lock file's lines that install from the working tree: `-e PATH`, `--editable PATH`, and
# paths (`.`, `./pkg`, `file:./pkg`), which pip reads relative to its working directory,
# the tree's root here (pip's "Requirements File Format").
_EDITABLE_PREFIXES = ("-e ", "--editable ", "--editable=")
# What decides an editable install's result: the code itself is read from /workspace at
# run time, its metadata (dependencies, entry points) only at install time.
PROJECT_FILES = ("pyproject.toml", "setup.py", "setup.cfg")
MAX_LOCAL_FILES = 10_000


def local_references(text: str) -> list[tuple[str, bool]]:
    """(path, editable) for each line of ``text`` that installs from the working tree."""
    found = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        editable = line.startswith(_EDITABLE_PREFIXES)
        if editable:
            line = line.split(" ", 1)[1] if line.startswith(("-e ", "--editable ")) else line.split("=", 1)[1]
            line = line.strip()
        elif line.startswith("-"):
            continue
        if line.startswith("file:"):
            line = urlsplit(line).path
        line = line.split("#", 1)[0].split("[", 1)[0].strip()
        if line.startswith((".", "/")):
            found.append((line, editable))
    return found


def _hash_local(digest, target: Path, editable: bool) -> None:
    """Adds what the install reads of ``target`` to ``digest``: an editable project's
    metadata files, else every regular file below it (links are not followed)."""
    if target.is_file():
        files = [target]
    elif editable:
        files = [target / name for name in PROJECT_FILES]
    else:
        files = []
        for directory, dirs, names in os.walk(target):
            dirs[:] = sorted(d for d in dirs if d not in (".git", "__pycache__"))
            files.extend(Path(directory) / name for name in sorted(names))
            if len(files) > MAX_LOCAL_FILES:
                raise BadInput(
                    f"{target.name}: more than {MAX_LOCAL_FILES} files in a package the requirements install "
                    "from the tree; install it as a wheel, or with -e"
                )
    for path in files:
        if not inside_tree(path, target if target.is_dir() else target.parent):
            continue
        digest.update(str(path.relative_to(target.parent)).encode() + b"\0")
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")


def install(executor: DockerExecutor, workdir: Path, lock_files: list[Path], prepared: str) -> None:
    """Install ``lock_files`` in a container of the base image and commit it as ``prepared``."""
    # As the prepare container sees them: the tree is mounted at /workspace.
    inside = {path: f"{WORKSPACE}/{path.relative_to(workdir)}" for path in lock_files}
    requirements = [a for p in lock_files if p.name.startswith("requirements") for a in ("-r", inside[p])]
    constraints = [a for p in lock_files if p.name.startswith("constraints") for a in ("-c", inside[p])]
    # --system-site-packages keeps the image's Debian pytest importable beside the venv.
    script = (
        f"({CONTAINER_PYTHON} -m venv --system-site-packages {DEPS_VENV} "
        f'&& {DEPS_VENV}/bin/pip install --no-input --disable-pip-version-check "$@"); '
        f'code=$?; printf "\\n{INSTALL_EXIT_MARK}%d\\n" "$code"; exit $code'
    )
    # Built from scratch: the install runs the repository's own code (setup.py, build
    # backends), so nothing of the worker's environment (index credentials, proxies,
    # tokens) goes in; the operator may name one index without credentials.
    environment = {"HOME": "/tmp", "PIP_NO_INPUT": "1"}
    if executor.settings.package_index_url:
        environment["PIP_INDEX_URL"] = executor.settings.package_index_url
        parts = urlsplit(executor.settings.package_index_url)
        if parts.scheme == "http":
            # pip ignores a plain-http index unless told to trust it: an index inside
            # the cluster, which the operator named and the sealed network leads to.
            environment["PIP_TRUSTED_HOST"] = parts.netloc
    network = executor.settings.docker_prepare_network
    if network == "index":
        # The sealed network: the index (through its relay) and nothing else.
        network = prepare_network.ensure(executor.client, executor.settings, executor._image_id)
    mounts = [Mount(WORKSPACE, str(workdir), type="bind", read_only=True)]
    try:
        container = executor.client.containers.create(
            executor.image,
            ["sh", "-c", script, "prepare", *requirements, *constraints],
            working_dir=WORKSPACE,
            environment=environment,
            mounts=mounts,
            network_mode=network,
            # The root stays writable here: the install writes the venv into the image.
            **executor._hardening(read_only=False, job_id=executor.job_id),
        )
    except APIError as exc:
        raise executor._engine_refused("the prepare container", exc) from None
    try:
        try:
            container.start()
        except APIError as exc:
            raise executor._engine_refused("the prepare container", exc) from None
        timeout = executor.settings.docker_prepare_timeout_s
        started = time.monotonic()
        try:
            status = container.wait(timeout=timeout)
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError) as exc:
            if time.monotonic() - started < timeout:
                # Before the timeout: the engine went away, not the install's time.
                raise EngineUnavailable(
                    f"the Docker engine was unavailable while installing the dependencies ({reason(exc)})"
                ) from None
            # docker-py reports a wait that ran out of time as a read timeout.
            kill_container(container)
            raise LagtraceError(
                f"installing the dependencies took more than {timeout:g} s (LAGTRACE_DOCKER_PREPARE_TIMEOUT_S)"
            ) from None
        if status.get("StatusCode") != 0:
            log = container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
            lines = log.splitlines()
            if not any(line.startswith(INSTALL_EXIT_MARK) for line in lines):
                container.reload()
                if not container.attrs["State"].get("OOMKilled"):
                    # The engine answered: the attempt counts, so a cause that repeats ends.
                    raise EngineUnavailable(
                        "the dependency install's container was killed from outside the install "
                        "(the Docker engine restarting, or a cancel)",
                        answered=True,
                    )
            tail = "\n".join(line for line in lines[-22:] if line and not line.startswith(INSTALL_EXIT_MARK))
            raise LagtraceError(f"installing the dependencies failed (exit {status.get('StatusCode')}):\n{tail}")
        base = executor.client.images.get(executor.image).attrs["Config"]
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
                    DEPS_SCOPE_LABEL: executor.cache_scope,
                },
            },
        )
    finally:
        remove_container(container)
