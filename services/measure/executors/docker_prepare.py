"""The docker executor's prepare: the working tree installed once, the way its
`.lagtrace.yml` says (``install:``) or its own files do (services/measure/install.py),
into an image cached by what the install reads (and the base image's id, and the
project's scope).

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
from docker.types import LogConfig, Mount

from services.errors import BadInput, EngineUnavailable, LagtraceError
from services.measure.executors import prepare_network
from services.measure.executors.docker_engine import reason
from services.measure.executors.docker_guards import (
    CONTAINER_PYTHON,
    RUNNER_UID,
    RUNNER_USER,
    WORKSPACE,
    check_workdir,
    kill_container,
    remove_container,
)
from services.measure.install import (
    Install,
    inside_tree,
    local_references,
    nested_files,
    plan_install,
    project_target,
    read_regular_file,
)

if TYPE_CHECKING:
    from services.measure.executors.docker import DockerExecutor

DEPS_LABEL = "lagtrace.deps"
DEPS_REPOSITORY = "lagtrace-deps"
DEPS_SCOPE_LABEL = "lagtrace.deps.scope"
DEPS_VENV = "/lagtrace/deps/venv"
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MAX_LOCK_FILE_BYTES = 1024 * 1024
# Bumped when the install's recipe changes what an image holds for the same files: the
# install is keyed by its command now, and builds the project from a copy of the tree.
KEY_RECIPE = b"install-2\0"
# Where the prepare container sees the tree when the install builds from it: a build
# backend writes into its source (setuptools' src/<pkg>.egg-info), so pip works on a
# writable copy at /workspace, the path the runs mount the tree at, and an editable
# install's paths (/workspace/src) then lead to the tree a run sees.
TREE = "/lagtrace/tree"
# The runner image's own wheels (Debian's python3-pip-whl: pip, setuptools): with them a
# setuptools project builds with no network (pip's isolated build installs its backend).
IMAGE_WHEELS = "/usr/share/python-wheels"
# The prepare script's last line, with the install's exit status: a container that exits
# without it was killed from outside (the shell is its first process, which nothing inside
# the container may kill), not by a failing install. The script writes a newline before it,
# so output the install left without one (a build backend writing to /proc/1/fd/1) cannot
# hide it (tests/security/test_measurement_channel.py).
INSTALL_EXIT_MARK = "lagtrace-install-exit "
# What the engine keeps of the install's output (json-file, one file: the oldest lines
# go), and what a failed install's message reads of it: pip's error is at its end
# (tests/services/measure/executors/test_docker_install.py prints 24 MB and fails).
INSTALL_LOG_MAX_SIZE = "8m"
INSTALL_LOG_TAIL_LINES = 400
# pip's words for a package it found nowhere, and for an index it could not reach.
NOT_FOUND = ("No matching distribution found", "Could not find a version that satisfies")
UNREACHABLE = (
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "ProxyError",
)


def prepare_dependencies(executor: DockerExecutor, workdir: Path, progress: Callable[[str], None]) -> str | None:
    """The prepared image for the working tree's install (built now unless cached), or None.

    The install is read from the tree itself, as every step's checkout has it: a pull
    request's base commit installs the way the base says. A fork's ``install:`` is its
    own too; it is one pip command in the same sandbox that runs the fork's setup.py, so
    it can do nothing that setup.py cannot.
    """
    check_workdir(workdir)
    plan = plan_install(workdir)
    if plan is None:
        if project_target(workdir) is not None:
            progress(
                "the project itself is not installed: `install: pip install -e .` in .lagtrace.yml "
                'installs it (docs/guides/github.md, "How the project is installed")'
            )
        return None
    base = executor._image_id.encode() + b"\0" + executor.cache_scope.encode() + b"\0"
    prepared = f"{DEPS_REPOSITORY}:{dependency_key(base, workdir, plan)}"
    said = f"`{plan.command}`"
    if plan.left_out:
        said += f"; not installed: {', '.join(plan.left_out)} (`install:` in .lagtrace.yml names what to install)"
    try:
        executor.client.images.get(prepared)
        progress(f"dependencies from {plan.origin}: cached in image {prepared} ({said})")
    except ImageNotFound:
        progress(f"installing dependencies from {plan.origin}: {said} (once; cached as image {prepared})")
        install(executor, workdir, plan, prepared)
    return prepared


def read_files(workdir: Path, plan: Install) -> list[tuple[str, bytes]]:
    """(tree path, content) of every requirement and constraint file the install reads:
    those it names, and those they name in turn (relative to the naming file, as pip
    reads them); files outside the tree or behind a link are not read (not mounted: the
    install fails and says so)."""
    found: list[tuple[str, bytes]] = []
    seen: set[Path] = set()
    pending = [workdir / name for _, name in plan.files()]
    root = workdir.resolve()
    while pending:
        path = Path(os.path.normpath(pending.pop(0)))
        if path in seen or not inside_tree(path, workdir):
            continue
        seen.add(path)
        content = read_regular_file(path, MAX_LOCK_FILE_BYTES)
        found.append((str(path.resolve().relative_to(root)), content))
        pending += [path.parent / name for name in nested_files(content.decode("utf-8", "replace"))]
    return found


def builds_from_tree(workdir: Path, plan: Install) -> bool:
    """Whether the install builds something of the tree (the project, a local package)."""
    return bool(plan.local()) or any(
        local_references(content.decode("utf-8", "replace")) for _, content in read_files(workdir, plan)
    )


def dependency_key(base: bytes, workdir: Path, plan: Install) -> str:
    """The prepared image's tag: the install's command, the files it reads, and what it
    installs from the tree itself (``local_references``, the project for ``-e .``), so a
    changed local package is installed again rather than served stale from the cache
    (tests/unit/services/measure/test_dependency_key.py)."""
    digest = hashlib.sha256(base + KEY_RECIPE)
    digest.update(plan.command.encode() + b"\0")
    references = list(plan.local())
    for name, content in read_files(workdir, plan):
        digest.update(name.encode() + b"\0" + content + b"\0")
        references += local_references(content.decode("utf-8", "replace"))
    for reference, editable in references:
        target = (workdir / reference).resolve()
        if not target.is_relative_to(workdir.resolve()):
            continue  # outside the tree: not mounted, the install fails and says so
        digest.update(f"{reference}\0{editable}\0".encode())
        _hash_local(digest, target, editable)
    return digest.hexdigest()[:16]


# What decides an editable install's result: the code itself is read from /workspace at
# run time, its metadata (dependencies, entry points) only at install time.
PROJECT_FILES = ("pyproject.toml", "setup.py", "setup.cfg")
MAX_LOCAL_FILES = 10_000


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
                    f"{target.name}: more than {MAX_LOCAL_FILES} files in a package the install builds "
                    "from the tree; install it with -e (pip install -e .), or as a wheel"
                )
    for path in files:
        if not inside_tree(path, target if target.is_dir() else target.parent):
            continue
        digest.update(str(path.relative_to(target.parent)).encode() + b"\0")
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")


def failure_hint(network: str, log: str) -> str:
    """What the operator can change when pip found a package nowhere or reached no index."""
    if network == "none" and any(words in log for words in (*NOT_FOUND, *UNREACHABLE)):
        return (
            "\nThe prepare step has no network (LAGTRACE_DOCKER_PREPARE_NETWORK=none): pip installs only what the "
            "tree and the runner image hold. Give it one: LAGTRACE_DOCKER_PREPARE_NETWORK=host (a machine of its own) "
            "or bridge (an engine with a bridge); index with LAGTRACE_PACKAGE_INDEX_URL in a cluster "
            '(docs/guides/service.md, "Installing the project")'
        )
    if any(words in log for words in UNREACHABLE):
        return (
            f"\npip reached no package index on the prepare network (LAGTRACE_DOCKER_PREPARE_NETWORK={network}; "
            'docs/guides/service.md, "Installing the project")'
        )
    return ""


def install(executor: DockerExecutor, workdir: Path, plan: Install, prepared: str) -> None:
    """Run ``plan`` in a container of the base image and commit it as ``prepared``."""
    copy = builds_from_tree(workdir, plan)
    # The tree at /workspace as pip sees it (its working directory): the mount itself, or
    # a writable copy of it without .git (the image has no git for a build to use) and
    # without the checkout's virtualenvs (a build reads neither; they fill the tmpfs).
    copy_tree = (
        f'for entry in {TREE}/* {TREE}/.[!.]* {TREE}/..?*; do [ -e "$entry" ] || [ -L "$entry" ] || continue; '
        f'[ "${{entry##*/}}" = .git ] || [ -e "$entry/pyvenv.cfg" ] || cp -R "$entry" {WORKSPACE}/ || exit 1; done && '
        if copy
        else ""
    )
    # --system-site-packages keeps the image's Debian pytest importable beside the venv.
    script = (
        f"({copy_tree}{CONTAINER_PYTHON} -m venv --system-site-packages {DEPS_VENV} "
        f'&& {DEPS_VENV}/bin/pip install --no-input --disable-pip-version-check "$@"); '
        f'code=$?; printf "\\n{INSTALL_EXIT_MARK}%d\\n" "$code"; exit $code'
    )
    # Built from scratch: the install runs the repository's own code (setup.py, build
    # backends), so nothing of the worker's environment (index credentials, proxies,
    # tokens) goes in; the operator may name one index without credentials.
    environment = {"HOME": "/tmp", "PIP_NO_INPUT": "1", "PIP_FIND_LINKS": IMAGE_WHEELS}
    if executor.settings.package_index_url:
        environment["PIP_INDEX_URL"] = executor.settings.package_index_url
        parts = urlsplit(executor.settings.package_index_url)
        if parts.scheme == "http":
            # pip ignores a plain-http index unless told to trust it: an index inside
            # the cluster, which the operator named and the sealed network leads to.
            environment["PIP_TRUSTED_HOST"] = parts.netloc
    network = setting = executor.settings.docker_prepare_network
    if network == "none":
        # No index can answer: pip says at once what it found nowhere, instead of
        # retrying an unreachable index for each requirement.
        environment["PIP_NO_INDEX"] = "1"
    if network == "index":
        # The sealed network: the index (through its relay) and nothing else.
        network = prepare_network.ensure(executor.client, executor.settings, executor._image_id)
    mounts = [Mount(TREE if copy else WORKSPACE, str(workdir), type="bind", read_only=True)]
    # The root stays writable here: the install writes the venv into the image.
    hardening = executor._hardening(read_only=False, job_id=executor.job_id)
    if copy:
        # A tmpfs, so the copy stays out of the committed image (runs mount the tree there).
        size = executor.settings.docker_tmpfs_size
        hardening["tmpfs"] = {
            **hardening["tmpfs"],
            WORKSPACE: f"rw,exec,nosuid,nodev,size={size},uid={RUNNER_UID},gid={RUNNER_UID}",
        }
    try:
        container = executor.client.containers.create(
            executor.image,
            ["sh", "-c", script, "prepare", *plan.args],
            working_dir=WORKSPACE,
            environment=environment,
            mounts=mounts,
            network_mode=network,
            log_config=LogConfig(type=LogConfig.types.JSON, config={"max-size": INSTALL_LOG_MAX_SIZE, "max-file": "1"}),
            **hardening,
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
                f"installing the dependencies took more than {timeout:g} s (LAGTRACE_DOCKER_PREPARE_TIMEOUT_S): "
                f"`{plan.command}` (from {plan.origin})"
            ) from None
        if status.get("StatusCode") != 0:
            # The tail only: the install runs the repository's code, which may print
            # without end (the engine keeps at most INSTALL_LOG_MAX_SIZE of it).
            log = container.logs(stdout=True, stderr=True, tail=INSTALL_LOG_TAIL_LINES).decode("utf-8", "replace")
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
            source = (
                plan.origin
                if plan.configured
                else f"found from {plan.origin}; `install:` in .lagtrace.yml names another"
            )
            raise LagtraceError(
                f"installing the dependencies failed (exit {status.get('StatusCode')}): `{plan.command}` "
                f"({source}):\n{tail}{failure_hint(setting, log)}"
            )
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
