"""One measured run per node at a time, across processes (docs/explanations/design.md#one-measurement-per-node).

A busy neighbouring core changes the very latency under study, so by default every
screen on a node takes the same lock. With LAGTRACE_PACK_DISJOINT_CORES runs lock only
the CPUs they are pinned to (all CPUs when they are not pinned), so runs on disjoint
cores may overlap; the job's report says so.

The locks are flock(2) files in LAGTRACE_NODE_LOCK_PATH: every worker of a node must
see the same directory (on Kubernetes a hostPath the chart mounts into every worker
pod), or each holds "the node" alone. The kernel drops a lock when its holder dies, so
a killed worker never leaves the node locked.
"""

from __future__ import annotations

import fcntl
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from services.settings import Settings

PACKING_NOTE = (
    "LAGTRACE_PACK_DISJOINT_CORES was on: runs of this job may have overlapped with other "
    "runs pinned to other cores of the same node, which changes cross-core latency"
)


@dataclass(frozen=True)
class Held:
    """Where a measurement ran and what it held: the report names both. ``locks`` are the
    locks' names (``node``, ``cpu0``), never their paths: a report is read by the job's
    users, and the worker's own directories are none of theirs."""

    node: str
    locks: tuple[str, ...]

    def as_dict(self) -> dict[str, object]:
        return {"node": self.node, "locks": list(self.locks)}


def lock_directory(settings: Settings) -> Path:
    return settings.node_lock_path or settings.work_dir / "locks"


def node_name(settings: Settings) -> str:
    """The Kubernetes node (the downward API's spec.nodeName), else this host's name."""
    return settings.node_name or socket.gethostname()


def lock_names(settings: Settings, cpuset: tuple[int, ...] | None) -> list[str]:
    if not settings.pack_disjoint_cores:
        return ["node"]
    cpus = cpuset if cpuset else sorted(os.sched_getaffinity(0))
    # Sorted, so two runs wanting overlapping sets always take them in the same order.
    return [f"cpu{cpu}" for cpu in sorted(cpus)]


@contextmanager
def measurement_slot(
    settings: Settings, cpuset: tuple[int, ...] | None, waiting: Callable[[str], None] = lambda message: None
) -> Iterator[Held]:
    """Hold the node (or, packing, the CPUs of ``cpuset``); ``waiting`` hears when another holds it.

    The node's lock is the directory itself (flock on it needs no write permission: a
    hostPath the kubelet made root's still serves a non-root worker); a CPU's is a file in
    it. Where no file may be made there, packing falls back to the whole node.
    """
    directory = lock_directory(settings)
    directory.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        held = []
        for wanted in lock_names(settings, cpuset):
            name, path, fd = wanted, directory / f"{wanted}.lock", None
            if name != "node":
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
                except PermissionError:
                    pass
            if fd is None:
                path, name = directory, "node"
                if name in held:
                    continue
                fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
            stack.callback(os.close, fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                waiting(f"waiting for another measurement on this node to finish ({path})")
                # Blocks in the kernel until the holder's process releases it or dies.
                fcntl.flock(fd, fcntl.LOCK_EX)
            held.append(name)
        yield Held(node_name(settings), tuple(held))


def lock_label(lock: str) -> str:
    """A held lock as a report names it: ``node`` or ``cpuN``. Jobs measured before the
    report named locks stored their paths: the directory (the node's lock) or ``cpuN.lock``."""
    if "/" not in lock:
        return lock
    base = os.path.basename(lock.rstrip("/"))
    return base.removesuffix(".lock") if base.endswith(".lock") else "node"
