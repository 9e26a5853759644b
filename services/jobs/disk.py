"""The worker's disk: a full one is the environment's fault, never the job's.

A job's checkout, run directories and the evidence it copies out all go under the work
directory. When it fills up (with dind, the pod's emptyDir; a checkout of a killed attempt
left behind), every step there fails, whatever its code. So a worker short of space takes
no step (the reconciler sends it again, to whichever worker has room), a step that fails
while the disk is short is given back uncounted, as for a database outage, and `lagtrace
alive --ready` fails so that Kubernetes' readiness probe shows it (docs/guides/reliability.md).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from services.settings import Settings


def _existing(path: Path) -> Path:
    """``path``, or its nearest existing parent when it is not made yet."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free_bytes(path: Path) -> int:
    """Free bytes for an unprivileged writer on ``path``'s file system."""
    return shutil.disk_usage(_existing(path)).free


def free_inodes(path: Path) -> int | None:
    """Free entries (inodes) for an unprivileged writer on ``path``'s file system; None
    where it counts none (f_files 0: btrfs and others make inodes as they go)."""
    info = os.statvfs(_existing(path))
    return info.f_favail if info.f_files else None


def short_of_space(settings: Settings) -> str | None:
    """Why the work directory cannot take a step now, or None when it has room: too few
    free bytes, or too few free entries (a job's many small files run a file system out of
    inodes while its bytes still show room; tests/chaos/test_disk.py)."""
    free = free_bytes(settings.work_dir)
    if free < settings.min_free_disk_bytes:
        return (
            f"the work directory {settings.work_dir} has {_size(free)} free, under "
            f"LAGTRACE_MIN_FREE_DISK_BYTES ({_size(settings.min_free_disk_bytes)})"
        )
    entries = free_inodes(settings.work_dir)
    if entries is not None and entries < settings.min_free_disk_inodes:
        return (
            f"the work directory {settings.work_dir} has {entries} free inodes (file entries), under "
            f"LAGTRACE_MIN_FREE_DISK_INODES ({settings.min_free_disk_inodes})"
        )
    return None


def _size(n: int) -> str:
    value, unit = float(n), "B"
    for bigger in ("KiB", "MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
