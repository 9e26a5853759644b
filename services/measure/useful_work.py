"""The CPU work that made progress, measured where the capacity is known.

A quota's share of a run is the program's work over the quota, and its work is not the
CPU time it happened to burn in its widest configuration: a thread pool sized to the
visible cores burns CPU on every core it sees, and what it burns beyond what bought
speedup is spinning (OpenBLAS's idle threads yield in a loop between calls; under a
quota that spinning is paid for in throttled time, docs/reference/findings.md).

The method (``METHOD``): in the narrowest configuration without a quota (fewest CPUs,
capacity known) the program kept ``busy`` CPUs busy for its wall time. Useful
parallelism on more cores is bounded by the speedup it bought there (the narrowest
wall over this wall), so the CPU time that made progress on them is at most
speedup x busy x wall, which is the narrowest configuration's own CPU time; CPU time
beyond it is spinning. The work is the least of those bounds. A process pool computing
for real (0.38 CPU-s on one core, 0.37 CPU-s in 0.23 s on two: 1.6x) keeps its CPU
time as work; an OpenBLAS pool that is 1.2x faster on two cores with 2.0 CPU-s where
one core needs 1.2 has 0.8 CPU-s of spinning (tests/unit/services/measure/
test_useful_work.py).

Shared by the rules that compare a quota configuration with the others
(services/diagnose/cpu_throttling.py) and usable by those that stretch a fast
configuration's time to a quota's (``useful_share``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

METHOD = (
    "useful work over the quota: the CPU time that bought speedup (at most speedup x the narrowest "
    "configuration's busy CPUs x wall, its own CPU time), the least over the configurations without a quota"
)


@dataclass(frozen=True)
class Measured:
    """A configuration without a quota, by the medians of its timing runs."""

    label: str
    cores: float  # CPUs it may use (math.inf: every core of the host)
    wall_s: float
    cpu_s: float  # user + sys

    @property
    def busy(self) -> float:
        """The CPUs it kept busy, on average over its wall time."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0


@dataclass(frozen=True)
class UsefulWork:
    cpu_s: float  # CPU-seconds that made progress
    label: str  # the configuration whose measurement bounds it
    narrowest: Measured  # where the capacity is known
    # Per wider configuration: its speedup over the narrowest, and the CPU time it burned
    # beyond what that speedup bought.
    speedup: dict[str, float] = field(default_factory=dict)
    spinning_s: dict[str, float] = field(default_factory=dict)

    @property
    def waiting_s(self) -> float:
        """Wall time of the narrowest run spent off every CPU (sleeping, waiting for I/O):
        time that no quota shortens or stretches, at most its whole wall."""
        return max(0.0, self.narrowest.wall_s - self.narrowest.cpu_s)


def useful_work(measured: Sequence[Measured]) -> UsefulWork | None:
    """The work of the configurations without a quota (``METHOD``); None without one."""
    usable = [m for m in measured if m.wall_s > 0]
    if not usable:
        return None
    narrowest = min(usable, key=lambda m: (m.cores, m.cpu_s))
    work, label = narrowest.cpu_s, narrowest.label
    speedup: dict[str, float] = {}
    spinning: dict[str, float] = {}
    for other in usable:
        if other is narrowest:
            continue
        gained = narrowest.wall_s / other.wall_s
        progress = min(other.cpu_s, gained * narrowest.busy * other.wall_s)
        speedup[other.label] = gained
        spinning[other.label] = other.cpu_s - progress
        if progress < work:
            # Less CPU for the same work than on the narrowest (time-slicing a pool on one
            # core costs switches): the least measurement of the work is the work.
            work, label = progress, other.label
    return UsefulWork(work, label, narrowest, speedup, spinning)


def useful_share(measured: Sequence[Measured], label: str) -> float | None:
    """The CPUs configuration ``label`` kept usefully busy: its useful work over its wall
    time, at most the CPUs it kept busy at all. What a quota's time to beat should stretch
    a fast configuration's time by (services/measure/survey.py ``_stretch`` and
    services/diagnose/cpu_sensitivity.py ``slowdowns`` read the busy CPUs instead: an
    oversubscribed pool's spinning then explains its own slowdown under the quota)."""
    work = useful_work(measured)
    own = next((m for m in measured if m.label == label), None)
    if work is None or own is None or own.wall_s <= 0:
        return None
    return min(own.busy, work.cpu_s / own.wall_s)
