"""What guards the host against the job's containers: where host directories appear in
them (the working tree read-only at /workspace, the run's directory at /lagtrace/run, as
uid 1000), the files they leave behind (never opened through a link or a device a
container planted), and the containers a killed lagtrace leaves behind (the orphan
reaper, and the kill of a cancelled job's runs).

Containers carry ``lagtrace.job``, ``lagtrace.installation`` (Settings.installation) and
``lagtrace.owner`` (host, pid and start time of the lagtrace process) labels: the reaper
removes only what a dead lagtrace process of this installation left, never another
installation's.
"""

from __future__ import annotations

import os
import socket
import stat
import time
from pathlib import Path

import docker
import requests
from docker.errors import DockerException, NotFound
from docker.models.containers import Container

from services.errors import BadInput, LagtraceError
from services.measure.executors.docker_engine import ENGINE_TIMEOUT_S
from services.settings import Settings

JOB_LABEL = "lagtrace.job"
OWNER_LABEL = "lagtrace.owner"
INSTALLATION_LABEL = "lagtrace.installation"
RUNNER_UID = 1000  # the runner image's non-root user; custom images keep this uid
RUNNER_USER = f"{RUNNER_UID}:{RUNNER_UID}"
# The image's own interpreter runs the timer, whatever virtualenv the job's PATH selects.
CONTAINER_PYTHON = "/usr/bin/python3"
# Where every run sees its checkout (read-only, the working directory) and its run_dir.
WORKSPACE = "/workspace"
RUN_DIR = "/lagtrace/run"
# A removal can fail for a moment: overlay2's "device or resource busy" leaves the
# container dead, a busy engine answers late, another removal is under way (409).
REMOVE_ATTEMPTS = 4


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


def create_exclusively(host_path: Path):
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


def closed_dirs(run_dir: Path) -> bool:
    """Whether a directory below ``run_dir`` is one this worker cannot list or empty: a
    worker that is not root meets those the container's uid 1000 made with a mode that
    keeps others out (0700, or even 0755: no one else may remove what is in it). Root
    meets none. Called once the container is gone, links never followed."""
    if os.geteuid() == 0:
        return False
    pending = [run_dir]
    while pending:
        try:
            with os.scandir(pending.pop()) as listing:
                for entry in listing:
                    if entry.is_dir(follow_symlinks=False):
                        if not os.access(entry.path, os.R_OK | os.W_OK | os.X_OK, follow_symlinks=False):
                            return True
                        pending.append(Path(entry.path))
        except OSError:
            return True
    return False


def give_to_runner(run_dir: Path) -> None:
    """Let the container's uid 1000 write the run's files (output, JUnit XML, evidence)."""
    if os.geteuid() == 0:
        os.chown(run_dir, RUNNER_UID, RUNNER_UID)
    else:
        os.chmod(run_dir, 0o777)


def check_workdir(workdir: Path) -> None:
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


def reap_orphans(client: docker.DockerClient, installation: str) -> list[str]:
    """Remove this installation's containers whose lagtrace process on this host no longer exists.

    Containers of lagtrace processes that are alive (other jobs on this node), of other
    hosts sharing the engine, and of other installations (another lagtrace, say a staging
    one, on the same engine) are left alone.
    """
    host = socket.gethostname()
    removed = []
    mine: dict[str, str | list[str] | bool] = {"label": [OWNER_LABEL, f"{INSTALLATION_LABEL}={installation}"]}
    # ignore_removed: the list inspects each container, and one a run of this installation
    # removes in between is no longer there (a 404 that is not the engine's trouble):
    # https://docker-py.readthedocs.io/en/stable/containers.html (ContainerCollection.list)
    for container in client.containers.list(all=True, filters=mine, ignore_removed=True):
        owner_host, _, process = container.labels.get(OWNER_LABEL, "").partition(":")
        pid, _, start_time = process.partition(":")
        if owner_host != host or not pid.isdigit():
            continue
        if process_start_time(int(pid)) == start_time:
            continue
        remove_container(container)
        removed.append(container_name(container))
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
        for container in client.containers.list(filters={"label": labels, "status": "running"}, ignore_removed=True):
            kill_container(container)
            stopped.append(container_name(container))
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
            for container in client.containers.list(all=True, filters={"label": labels}, ignore_removed=True):
                remove_container(container)
                removed.append(container_name(container))
        finally:
            client.close()
    except (DockerException, requests.RequestException):
        pass  # away again: the reaper of this installation gets them once this process ends
    return removed


def container_name(container: Container) -> str:
    """What the logs call a container: its name (an inspected container always has one)."""
    return container.name or container.short_id


def owner_id(pid: int | None = None) -> str:
    """This process as the reaper identifies it: pids are reused, pid + start time are not."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{process_start_time(pid)}"


def process_start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22, counted after the command name, which may itself contain spaces.
    return stat.rsplit(")", 1)[1].split()[19]


def kill_container(container) -> None:
    try:
        container.kill()
    except (DockerException, requests.RequestException):
        pass  # already gone: nothing left to stop


def remove_container(container) -> None:
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
