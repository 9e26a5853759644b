"""How busy the rest of the machine was during a run.

A busy neighbouring core changes the very latency lagtrace studies (a thread that
would have slept on an idle core finds it awake), so every run records how much CPU
*other* processes used meanwhile on the cores the run could use, and the report warns
when it was a lot.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

_TICKS = os.sysconf("SC_CLK_TCK")
# Above this many CPUs of other work during a run, progress and report say the machine
# was busy and the verdict may be wrong.
BUSY_MACHINE_CPUS = 0.3


def busy_cpu_seconds(cpus: Iterable[int] | None = None) -> float:
    """CPU time all processes have used since boot on ``cpus`` (every CPU when None), from
    /proc/stat's per-CPU lines: a run pinned to some cores is disturbed by work on those
    cores, not by a job packed on others (LAGTRACE_PACK_DISJOINT_CORES)."""
    wanted = None if cpus is None else {f"cpu{n}" for n in cpus}
    ticks = 0
    with open("/proc/stat") as handle:
        for line in handle:
            if not line.startswith("cpu"):
                break
            name, *fields = line.split()
            if name == "cpu" if wanted is None else name in wanted:
                user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
                ticks += user + nice + system + irq + softirq + steal
    return ticks / _TICKS


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


def run_delay_s(pid: int) -> float | None:
    """How long ``pid``'s main thread waited on a run queue for a CPU (the second field of
    /proc/PID/schedstat, in ns: docs.kernel.org/scheduler/sched-stats.html). Read once it
    has ended but before it is reaped (waitid WNOWAIT), when the count is final. What
    foreign_cpus cannot say: an average busy core says nothing of how many others queued
    with the run, and a run behind two of them waits twice its own CPU time. None where
    the kernel keeps no such count (no CONFIG_SCHED_INFO)."""
    try:
        with open(f"/proc/{pid}/schedstat") as handle:
            return int(handle.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def shared_cores_warning(environ: dict[str, str] | None = None) -> str | None:
    """What a worker in a Kubernetes pod says at start when its CPU set is the whole node's:
    every other pod's work then lands on the cores it measures on, and runs are taken
    again or judged with a busy-machine note. None outside Kubernetes (a machine of one's
    own) or with cores of its own (the kubelet's static CPU manager gives a Guaranteed
    pod's integer CPUs exclusively: docs/guides/kubernetes.md)."""
    environ = dict(os.environ) if environ is None else environ
    if "KUBERNETES_SERVICE_HOST" not in environ:
        return None
    mine, node = len(os.sched_getaffinity(0)), os.cpu_count() or 0
    if mine < node:
        return None
    return (
        f"this worker shares all {node} CPUs of its node with every other pod: a busy neighbour disturbs "
        "the runs it measures. Give it cores of its own: the kubelet's static CPU manager policy with "
        "integer CPU requests equal to limits (the chart's ci/whole-cores-values.yaml), or a dedicated node pool"
    )
