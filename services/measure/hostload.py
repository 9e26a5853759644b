"""How busy the rest of the machine was during a run.

A busy neighbouring core changes the very latency lagtrace studies (a thread that
would have slept on an idle core finds it awake), so every run records how much CPU
*other* processes used meanwhile, and the report warns when it was a lot.
"""

from __future__ import annotations

import os

_TICKS = os.sysconf("SC_CLK_TCK")
# Above this many CPUs of other work during a run, progress and report say the machine
# was busy and the verdict may be wrong.
BUSY_MACHINE_CPUS = 0.3


def busy_cpu_seconds() -> float:
    """CPU time all processes have used since boot, from the first line of /proc/stat."""
    with open("/proc/stat") as handle:
        fields = handle.readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) / _TICKS


def own_io() -> dict[str, int]:
    """This process's I/O counters, which include those of every child it has reaped.

    The kernel adds a reaped child's counters to its parent's, so the difference around
    a wait4() is the command's I/O (read syscalls and bytes) with no tracer attached.
    """
    with open("/proc/self/io") as handle:
        return {key: int(value) for key, value in (line.split(": ") for line in handle.read().splitlines())}


def foreign_cpus(busy_before: float, busy_after: float, own_cpu_s: float, wall_s: float) -> float:
    """Average number of CPUs other processes kept busy while the run lasted."""
    if wall_s <= 0:
        return 0.0
    return max(0.0, (busy_after - busy_before - own_cpu_s) / wall_s)
