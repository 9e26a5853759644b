"""One measured run per node at a time, across processes (DESIGN.md section 8).

A busy neighbouring core changes the very latency under study, so by default every
screen on a node takes the same lock. With LAGTRACE_PACK_DISJOINT_CORES runs lock only
the CPUs they are pinned to (all CPUs when they are not pinned), so runs on disjoint
cores may overlap; the job's report says so.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

from services.settings import Settings

PACKING_NOTE = (
    "LAGTRACE_PACK_DISJOINT_CORES was on: runs of this job may have overlapped with other "
    "runs pinned to other cores of the same node, which changes cross-core latency"
)


def lock_names(settings: Settings, cpuset: tuple[int, ...] | None) -> list[str]:
    if not settings.pack_disjoint_cores:
        return ["node"]
    cpus = cpuset if cpuset else sorted(os.sched_getaffinity(0))
    # Sorted, so two runs wanting overlapping sets always take them in the same order.
    return [f"cpu{cpu}" for cpu in sorted(cpus)]


@contextmanager
def measurement_slot(
    settings: Settings, cpuset: tuple[int, ...] | None, waiting: Callable[[str], None] = lambda message: None
) -> Iterator[None]:
    """Hold the node (or, packing, the CPUs of ``cpuset``); ``waiting`` hears when another holds it."""
    directory = settings.work_dir / "locks"
    directory.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        for name in lock_names(settings, cpuset):
            path = directory / f"{name}.lock"
            handle = stack.enter_context(open(path, "a"))
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                waiting(f"waiting for another measurement on this node to finish ({path})")
                # Blocks in the kernel until the holder's process releases it or dies.
                fcntl.flock(handle, fcntl.LOCK_EX)
        yield
