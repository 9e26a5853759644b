"""Runs inside the job's container as its first process: starts the command, measures it.

Container start-up (about 200 ms here) must not count as test time, so the clock, the
rusage and the cgroup counters are all read in here, around fork/exec and wait4, the
same way the local executor does on the host.

The docker executor passes this file's source to the image's own interpreter
(``/usr/bin/python3 -I -S -c SOURCE ...``): standard library only, Python 3.11, and no
imports from lagtrace but the stall clock's (below).

Protocol with the executor, on stdout: first line ``pid <N>`` (the command's pid inside
the container, for the evidence tools), then one line of JSON: the measurement. After
that the timer lingers, keeping the container alive, so evidence tools can still run in
it (gdb reading the core taken during a stall) until the executor removes it; LINGER_S
bounds that for a lagtrace that died before removing it.

It owns the run's stall clock (stall_clock.py, shared with the local executor, which runs
it on the host). Inside the container lagtrace is not installed: the docker executor's
SOURCE first puts that module's source in ``sys.modules`` under its own name, and the
import below finds it there (docker.py ``timer_source``).
"""

import json
import os
import signal
import sys
import time

from services.measure.executors.stall_clock import StallClock, wait_unreaped

CPU_STAT_FILES = ("/sys/fs/cgroup/cpu.stat", "/sys/fs/cgroup/cpu/cpu.stat", "/sys/fs/cgroup/cpu,cpuacct/cpu.stat")
# cgroup v2, then v1: both carry an ``oom_kill`` counter (v1 since Linux 4.13).
PR_SET_DUMPABLE = 4  # <linux/prctl.h>
OOM_FILES = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")


def _fields(path):
    try:
        with open(path) as handle:
            return dict(line.split()[:2] for line in handle if len(line.split()) >= 2)
    except OSError:
        return None


def cpu_stat():
    for path in CPU_STAT_FILES:
        fields = _fields(path)
        if fields and "nr_periods" in fields:
            if "throttled_usec" in fields:
                throttled_s = int(fields["throttled_usec"]) / 1e6
            else:
                throttled_s = int(fields.get("throttled_time", 0)) / 1e9
            return [int(fields["nr_periods"]), int(fields.get("nr_throttled", 0)), throttled_s]
    return None


def oom_kills():
    for path in OOM_FILES:
        fields = _fields(path)
        if fields and "oom_kill" in fields:
            return int(fields["oom_kill"])
    return None


def busy_cpu_seconds():
    """Busy CPU time on the container's CPUs (its cpuset), as services/hostload.py reads it
    (/proc/stat is not namespaced): the executor turns the difference into CPUs other
    processes used on the cores this run could use."""
    wanted = {f"cpu{n}" for n in os.sched_getaffinity(0)}
    ticks = 0
    with open("/proc/stat") as handle:
        for line in handle:
            if not line.startswith("cpu"):
                break
            name, *fields = line.split()
            if name in wanted:
                user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
                ticks += user + nice + system + irq + softirq + steal
    return ticks / os.sysconf("SC_CLK_TCK")


def run_delay_s(pid):
    """The ended command's wait on a run queue, as services/hostload.py reads it."""
    try:
        with open(f"/proc/{pid}/schedstat") as handle:
            return int(handle.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def own_io(handle):
    """The timer's I/O counters, which take in the command's once it is reaped (as in
    services/hostload.py): the difference is the command's read syscalls and bytes.
    ``handle`` is /proc/self/io opened before the timer became non-dumpable (the file is
    then root's, mode 0400); reading through it stays allowed to the process itself."""
    handle.seek(0)
    return {key: int(value) for key, value in (line.split(": ") for line in handle.read().splitlines())}


def set_dumpable(flag):
    """prctl(2) PR_SET_DUMPABLE. The timer makes itself non-dumpable: its /proc files then
    belong to root and ptrace(2) of it needs CAP_SYS_PTRACE, which the command (no effective
    capabilities) lacks, so the command cannot write a forged measurement into the timer's
    stdout through /proc/1/fd/1, nor stop the timer. The child sets itself dumpable again
    before execve(2), so the evidence tools still attach to the command
    (tests/security/test_measurement_channel.py)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, flag, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl(PR_SET_DUMPABLE, {flag})")


def main():
    output_path, timeout_text, linger_text, stall_text, separator, *command = sys.argv[1:]
    if separator != "--" or not command:
        sys.exit("usage: container_timer OUTPUT TIMEOUT LINGER STALL -- COMMAND...")
    timeout_s = None if timeout_text == "none" else float(timeout_text)
    stall = None if stall_text == "none" else json.loads(stall_text)
    io_counters = open("/proc/self/io")  # noqa: SIM115 - read again after the command
    set_dumpable(0)

    before_cpu, before_oom = cpu_stat(), oom_kills()
    output = os.open(output_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    devnull = os.open(os.devnull, os.O_RDONLY)
    clock = None if stall is None else StallClock(stall)
    busy_before = busy_cpu_seconds()
    io_before = own_io(io_counters)
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.setsid()  # one process group, so the timeout kills what the command started
        os.dup2(devnull, 0)
        os.dup2(output, 1)
        os.dup2(output, 2)
        try:
            set_dumpable(1)
            os.execvp(command[0], command)
        except OSError as exc:
            os.write(2, f"lagtrace: cannot execute {command[0]!r}: {exc.strerror}\n".encode())
            os._exit(127)
    os.close(output)
    if clock is not None:
        clock.start(pid, started)
    print(f"pid {pid}", flush=True)

    timed_out = []

    def kill_at_timeout(signum, frame):
        timed_out.append(True)
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    if timeout_s is not None:
        signal.signal(signal.SIGALRM, kill_at_timeout)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
    # PEP 475: waitid and wait4 resume by themselves after the alarm handler.
    wait_unreaped(pid)
    wall_s = time.perf_counter() - started
    delay_s = run_delay_s(pid)
    if clock is not None:
        clock.stop()
    _, status, usage = os.wait4(pid, 0)
    busy_after = busy_cpu_seconds()
    io_after = own_io(io_counters)
    signal.setitimer(signal.ITIMER_REAL, 0)
    try:  # background processes the command left would load the next measurement
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass

    after_cpu, after_oom = cpu_stat(), oom_kills()
    throttling = None
    if before_cpu is not None and after_cpu is not None:
        throttling = [after - before for after, before in zip(after_cpu, before_cpu, strict=False)]
    result = {
        "wall_s": wall_s,
        "user_s": usage.ru_utime,
        "sys_s": usage.ru_stime,
        "max_rss_kb": usage.ru_maxrss,
        "voluntary_ctx_switches": usage.ru_nvcsw,
        "involuntary_ctx_switches": usage.ru_nivcsw,
        "exit_code": os.waitstatus_to_exitcode(status),
        "timed_out": bool(timed_out),
        "throttling": throttling,
        "busy_cpu_s": [busy_before, busy_after],
        "run_delay_s": delay_s,
        "read_syscalls": io_after["syscr"] - io_before["syscr"],
        "read_bytes": io_after["rchar"] - io_before["rchar"],
        "oom_killed": before_oom is not None and after_oom is not None and after_oom > before_oom,
    }
    print(json.dumps(result), flush=True)
    time.sleep(float(linger_text))


if __name__ == "__main__":
    main()
