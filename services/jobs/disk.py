"""The worker's disk: a full one is the environment's fault, unless the job filled it.

A job's checkout, run directories and the evidence it copies out all go under the work
directory. When it fills up (with dind, the pod's emptyDir; a checkout of a killed attempt
left behind), every step there fails, whatever its code. So a worker short of space takes
no step (the reconciler sends it again, to whichever worker has room), a step that fails
while the disk is short is given back uncounted, as for a database outage, unless its own
runs filled it (``own_doing``), and `lagtrace alive --ready` fails so that Kubernetes'
readiness probe shows it (docs/guides/reliability.md). What a step's runs may write at
all is capped per run and per step (services/measure/executors/scratch.py).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from services.measure.executors.scratch import ScratchAccount
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


def room(settings: Settings) -> tuple[int, int | None]:
    """The work directory's free bytes and free inodes (None: not counted) now."""
    return free_bytes(settings.work_dir), free_inodes(settings.work_dir)


def own_doing(settings: Settings, account: ScratchAccount) -> str | None:
    """Why a step that failed while the work directory is short of space filled it
    itself, or None where its own scratch is small: its runs never held as much as the
    room it was taken with (the free space above the threshold then), nor as much as the
    threshold itself. A step whose own runs filled the disk fails, counted; one on a disk
    others filled is given back uncounted (docs/guides/reliability.md). Run directories
    go under TMPDIR (the chart's is in the work directory): on another file system
    (a tmpfs /tmp), they filled nothing here."""
    if os.stat(_existing(Path(tempfile.gettempdir()))).st_dev != os.stat(_existing(settings.work_dir)).st_dev:
        return None
    found_bytes, found_inodes = account.room or (0, None)
    held = account.most_held
    enough = max(settings.min_free_disk_bytes, found_bytes - settings.min_free_disk_bytes)
    if held.bytes >= enough:
        return (
            f"its own runs held {_size(held.bytes)} in one run directory, as much as the room it was taken "
            f"with ({_size(enough)}): the job's doing, not the disk's"
        )
    if found_inodes is not None:
        enough = max(settings.min_free_disk_inodes, found_inodes - settings.min_free_disk_inodes)
        if held.entries >= enough:
            return (
                f"its own runs made {held.entries} entries in one run directory, as many as the room it was "
                f"taken with ({enough} inodes): the job's doing, not the disk's"
            )
    return None


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
