"""Per-run cgroups that enforce a CPU quota (``cpus=0.5``) and report throttling.

cgroup v1 (``cpu.cfs_quota_us``) and v2 (``cpu.max``) are both handled; which one is
used follows what the host mounts. Where neither can be written, ``probe()`` says why,
so the caller refuses the configuration instead of running it unenforced.
"""

from __future__ import annotations

import errno
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

PERIOD_US = 100_000  # the kernel's default CFS period

# The longest pause a CPU quota imposes: the rest of one CFS period (docker's --cpus and
# lagtrace's own cgroups both use the kernel's default), with a margin for the
# scheduler's wake-up. Once its quota is spent the kernel stops the program until the
# period ends, and a run either meets such a pause inside its timed span or does not.
THROTTLE_PAUSE_S = 1.2 * PERIOD_US / 1e6


@dataclass(frozen=True)
class CpuStat:
    nr_periods: int
    nr_throttled: int
    throttled_s: float


@dataclass(frozen=True)
class Hierarchy:
    version: int  # 1 or 2
    parent: Path  # the folder our per-run groups are made in


def _own_cgroup(controller: str | None) -> str:
    """Our cgroup's path inside a hierarchy, from /proc/self/cgroup."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller is None and controllers == "":
            return path
        if controller is not None and controller in controllers.split(","):
            return path
    return "/"


def find_hierarchy(root: Path, name: str) -> Hierarchy | str:
    """The hierarchy to make quota groups in, or the reason there is none."""
    for mount in (root / "cpu", root / "cpu,cpuacct"):
        if (mount / "cpu.cfs_quota_us").exists():
            own = _own_cgroup("cpu").lstrip("/")
            return Hierarchy(1, mount / own / name)
    controllers = root / "cgroup.controllers"
    if controllers.exists():
        if "cpu" not in controllers.read_text().split():
            return f"the cgroup v2 hierarchy at {root} has no cpu controller"
        own = _own_cgroup(None).lstrip("/")
        return Hierarchy(2, root / own / name)
    return f"no writable cgroup cpu controller found under {root}"


class QuotaGroup:
    """One run's cgroup. Create, let the child join it, read its cpu.stat, remove it."""

    def __init__(self, hierarchy: Hierarchy, cpus: float):
        self.hierarchy = hierarchy
        self.cpus = cpus
        self.path = hierarchy.parent / f"run-{uuid.uuid4().hex[:12]}"

    def create(self) -> None:
        quota_us = max(1000, round(self.cpus * PERIOD_US))  # the kernel's minimum is 1 ms
        self.hierarchy.parent.mkdir(parents=True, exist_ok=True)
        if self.hierarchy.version == 2:
            _enable_cpu_controller(self.hierarchy.parent)
        self.path.mkdir()
        if self.hierarchy.version == 1:
            (self.path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (self.path / "cpu.cfs_quota_us").write_text(str(quota_us))
        else:
            (self.path / "cpu.max").write_text(f"{quota_us} {PERIOD_US}")

    def join_current_process(self) -> None:
        """Called in the child between fork and exec, so the command starts inside the group."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def cpu_stat(self) -> CpuStat:
        fields = dict(line.split() for line in (self.path / "cpu.stat").read_text().splitlines() if line.strip())
        if "throttled_usec" in fields:
            throttled_s = int(fields["throttled_usec"]) / 1e6
        else:
            throttled_s = int(fields.get("throttled_time", 0)) / 1e9
        return CpuStat(int(fields.get("nr_periods", 0)), int(fields.get("nr_throttled", 0)), throttled_s)

    def remove(self) -> None:
        # The group empties only once the kernel has reaped every member; give it a moment.
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    raise
                time.sleep(0.02)


def _enable_cpu_controller(parent: Path) -> None:
    control = parent.parent / "cgroup.subtree_control"
    if "cpu" not in control.read_text().split():
        control.write_text("+cpu")
    own = parent / "cgroup.subtree_control"
    if "cpu" not in own.read_text().split():
        own.write_text("+cpu")


def probe(root: Path, name: str) -> Hierarchy | str:
    """Make and remove a test group: the hierarchy when quotas work here, else why not."""
    found = find_hierarchy(root, name)
    if isinstance(found, str):
        return found
    group = QuotaGroup(found, 0.5)
    try:
        group.create()
    except OSError as exc:
        return f"cannot create a cgroup with a CPU quota under {found.parent}: {exc.strerror or exc}"
    finally:
        try:
            group.remove()
        except OSError:
            pass
    return found
