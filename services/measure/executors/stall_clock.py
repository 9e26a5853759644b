"""The stall clock: at the stall deadline it freezes the command's whole process group,
takes the snapshot tools while everything is frozen, and thaws it, with no round trip
through the host or ``docker exec`` (a tool started beside a hand-off pathology lends it
a core and can end the very stall it came to see; docs/explanations/design.md).

It runs in the process that owns the run's clock: the container's timer
(container_timer.py, which the docker executor ships into the container with this module)
or the local executor on the host. Like the timer: standard library only, Python 3.11, and
no imports from lagtrace.
"""

import json
import os
import re
import select
import signal
import subprocess
import threading
import time
from typing import Any

STALL = "stall"
BEFORE_TIMEOUT = "before_timeout"
CRASH = "crash"  # a process reported a fatal signal (SIGSEGV, ...) and stopped itself
CLOCK_FILE = "stall-clock.json"  # the clock's record, written when the run has ended
# A pytest plugin (put on PYTHONPATH, named in PYTEST_PLUGINS) writes "start PID NODEID"
# and "end PID NODEID" lines into this FIFO, so the deadline counts from the test's start;
# a crash hook (sitecustomize) writes "crash PID SIGNAL" and stops its process.
FIFO_NAME = "stall-clock.fifo"
MAX_PROCESSES = 8  # Python processes dumped per snapshot (xdist workers, wrappers)
MAX_CORES = 4  # and cores taken; each costs about 0.2 s of freeze per 150 MB
TOOL_TIMEOUT_S = 60.0
_PYTHON_EXE = re.compile(r"(^|/)(python|pypy)[0-9.]*[a-z]?$")


def _stat(pid):
    """(ppid, pgid, state) of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), int(fields[2]), fields[0]


def descendants(root):
    """The command's process tree, root first: walked by parent pid, because a wrapper's
    child may have left the process group (setsid, setpgid) and still be the test."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            found = _stat(int(name))
            if found is not None:
                children.setdefault(found[0], []).append(int(name))
    tree, queue = [], [root]
    while queue:
        pid = queue.pop(0)
        tree.append(pid)
        queue.extend(sorted(children.get(pid, ())))
    return tree


def _read(path, limit=65536):
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def _exe(pid):
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def describe(pid):
    """What a process is: its executable and command line, and whether it runs Python."""
    exe = _exe(pid)
    cmdline = [arg for arg in (_read(f"/proc/{pid}/cmdline") or "").split("\0") if arg]
    python = bool(exe and _PYTHON_EXE.search(exe.replace(" (deleted)", "")))
    if not python and exe:
        maps = _read(f"/proc/{pid}/maps", 1 << 20) or ""
        python = "libpython" in maps
    return {"pid": pid, "exe": exe, "cmdline": cmdline[:8], "python": python}


def threads_at(pid):
    """Each thread's kernel view while frozen: the syscall it sits in (202 = futex on
    x86_64; -1 = running user code when stopped) and its name."""
    found: list[dict[str, Any]] = []
    try:
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return found
    for tid in tids:
        syscall = (_read(f"/proc/{pid}/task/{tid}/syscall") or "").split()
        found.append(
            {
                "tid": tid,
                "name": (_read(f"/proc/{pid}/task/{tid}/comm") or "").strip(),
                "syscall": int(syscall[0]) if syscall and syscall[0].lstrip("-").isdigit() else None,
            }
        )
    return found


def elf_symbol(path, name):
    """(address, size, is_shared_object) of a symbol in an ELF64 file's .dynsym (or
    .symtab), or None. Only the dynamic table is needed: an interpreter stripped of its
    debug information (Debian's python3 without -dbg packages) still exports _PyRuntime."""
    import struct

    wanted = name.encode()
    try:
        with open(path, "rb") as handle:
            header = handle.read(64)
            if len(header) < 64 or header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
                return None  # only little-endian ELF64 (x86_64, aarch64)
            e_type = struct.unpack_from("<H", header, 16)[0]
            shoff = struct.unpack_from("<Q", header, 40)[0]
            shentsize, shnum = struct.unpack_from("<HH", header, 58)
            handle.seek(shoff)
            sections = [struct.unpack("<IIQQQQIIQQ", handle.read(shentsize)[:64]) for _ in range(min(shnum, 4096))]
            for kind in (11, 2):  # SHT_DYNSYM, then SHT_SYMTAB
                for section in sections:
                    if section[1] != kind or section[9] == 0:
                        continue
                    strings = sections[section[6]]
                    handle.seek(strings[4])
                    names = handle.read(min(strings[5], 64 << 20))
                    handle.seek(section[4])
                    table = handle.read(min(section[5], 64 << 20))
                    for offset in range(0, len(table) - 23, 24):
                        st_name, _, _, _, value, size = struct.unpack_from("<IBBHQQ", table, offset)
                        end = names.find(b"\0", st_name)
                        if value and names[st_name:end] == wanted:
                            return value, size, e_type == 3  # ET_DYN: add the load bias
    except (OSError, struct.error, IndexError):
        return None
    return None


def gil_range(pid):
    """Where the interpreter keeps its GIL in this process: the address range of its
    _PyRuntime (the GIL's condition variables and mutex live in it, 3.7 to 3.13), found
    through the executable or libpython mapped in /proc/PID/maps; None if not found.

    A thread blocked in futex on an address in this range waits for the GIL: locks,
    queues and conditions of Python code wait on semaphores allocated elsewhere."""
    maps = _read(f"/proc/{pid}/maps", 1 << 21) or ""
    files: dict[str, int] = {}
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        start, offset, path = int(parts[0].split("-")[0], 16), int(parts[2], 16), parts[5].strip()
        if offset == 0 and (path not in files or start < files[path]):
            files[path] = start
    candidates = sorted(files, key=lambda path: ("libpython" not in path, not _PYTHON_EXE.search(path)))
    for path in candidates:
        if "libpython" not in path and not _PYTHON_EXE.search(path):
            continue
        found = elf_symbol(f"/proc/{pid}/root{path}", "_PyRuntime") or elf_symbol(path, "_PyRuntime")
        if found:
            value, size, shared = found
            start = value + (files[path] if shared else 0)
            return start, start + max(size, 1)
    return None


# x86_64 and aarch64 futex syscall numbers (the other is never seen on one machine)
FUTEX_SYSCALLS = (202, 98)
# 40 looks before the stall deadline: the share of looks with a waiter is what
# gil_contention prices, and with 20 a hand-off waiting in 40 % of the time was seen in
# only 4 of them once in 10 jobs (docs/measurements/accuracy.md), under the 25 % the rule needs.
GIL_SAMPLES = 40
GIL_SAMPLE_INTERVAL_S = 0.005  # the closest two looks come
# The looks are spread over the last three quarters of the time to the deadline (at least
# the 40 looks' 0.2 s), not bunched just before it: a run that is slow, but not slow
# enough to reach the deadline, was still looked at (a hand-off run that took 0.37 s
# against a 0.5 s deadline had no look: docs/measurements/accuracy.md, without debug info).
GIL_LOOKS_FROM = 0.25


def look_window(after):
    """How long before the deadline the looks begin, for a deadline ``after`` seconds
    from the start (of the run, or of the test)."""
    return max(GIL_SAMPLES * GIL_SAMPLE_INTERVAL_S, (1.0 - GIL_LOOKS_FROM) * after)


def thread_waits(pid, gil):
    """One look at every thread: tid -> "gil" (blocked in futex on the GIL), "futex"
    (another lock), "running", or "syscall"; read without stopping anything."""
    states: dict[str, str] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return states
    for tid in tids:
        fields = (_read(f"/proc/{pid}/task/{tid}/syscall") or "").split()
        if not fields:
            continue
        if fields[0] == "running":
            states[tid] = "running"
        elif fields[0].isdigit() and int(fields[0]) in FUTEX_SYSCALLS and len(fields) > 1:
            address = int(fields[1], 16)
            states[tid] = "gil" if gil is not None and gil[0] <= address < gil[1] else "futex"
        else:
            states[tid] = "syscall"
    return states


class GilLooks:
    """Repeated looks at each Python process's threads while it runs (one instant can fall
    between two hand-offs): by pid, how many looks saw a thread waiting for the GIL, and
    per thread how often it waited. The processes are those of the first look that finds
    Python in ``root``'s tree (the tester first), or the ``pids`` given."""

    def __init__(self, root=None, tester=None, pids=None):
        self.root, self.tester = root, tester
        self.ranges = {}
        self.found = {}
        self.exes = {}
        self.looks = 0
        if pids is not None:
            self._watch(pids)

    def _watch(self, pids):
        self.exes = {pid: _exe(pid) for pid in pids}
        self.ranges = {pid: gil_range(pid) for pid in pids}
        self.found = {
            pid: {"samples": 0, "with_waiter": 0, "threads": {}, "gil_found": self.ranges[pid] is not None}
            for pid in pids
        }

    def look(self):
        self.looks += 1
        # A look right after the fork sees the child before its exec, still the parent's
        # interpreter (whose GIL is elsewhere): once it has exec'd, find the processes again.
        if self.root is not None and any(_exe(pid) not in (exe, None) for pid, exe in self.exes.items()):
            self.ranges, self.found, self.exes = {}, {}, {}
        if not self.ranges and self.root is not None:
            tree = descendants(self.root)
            python = [pid for pid in tree if describe(pid)["python"]]
            python.sort(key=lambda pid: (pid != self.tester, -tree.index(pid)))
            self._watch(python[:MAX_PROCESSES])  # none yet: the next look tries again
        for pid, gil in self.ranges.items():
            states = thread_waits(pid, gil)
            if not states:
                continue
            entry = self.found[pid]
            entry["samples"] += 1
            waiting = [tid for tid, state in states.items() if state == "gil"]
            if waiting:
                entry["with_waiter"] += 1
            for tid in waiting:
                entry["threads"][tid] = entry["threads"].get(tid, 0) + 1


def gil_samples(pids, count=GIL_SAMPLES, interval_s=GIL_SAMPLE_INTERVAL_S):
    """``count`` looks at these processes, ``interval_s`` apart: GilLooks.found."""
    looks = GilLooks(pids=pids)
    for index in range(count):
        if index:
            time.sleep(interval_s)
        looks.look()
    return looks.found


def wait_stopped(pids, limit_s=0.25):
    """SIGSTOP is delivered asynchronously: wait until every thread of these processes is
    really stopped (or gone), so what the tools read is one frozen instant. Returns how
    long it took, or None when some thread would not stop in time."""
    started = time.perf_counter()
    while True:
        moving = False
        for pid in pids:
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                found = _stat(f"{pid}/task/{tid}")
                if found is not None and found[2] not in "TtZX":
                    moving = True
                    break
            if moving:
                break
        elapsed = time.perf_counter() - started
        if not moving:
            return elapsed
        if elapsed > limit_s:
            return None
        time.sleep(0.0002)


def run_tool(argv, timeout_s=TOOL_TIMEOUT_S, env=None):
    """A snapshot tool, by path, from ``env`` (None: this process's own; the container's
    timer passes lagtrace's, since its own is the job's: gcore is a script that finds
    bash and gdb on PATH). At the timeout its whole session is killed: gcore's gdb would
    otherwise hold the pipes open, and the wait with them."""
    started = time.perf_counter()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        code, out, err = 127, b"", f"cannot run {os.path.basename(argv[0])}: {exc.strerror}".encode()
    else:
        try:
            out, err = proc.communicate(timeout=timeout_s)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out, err = proc.communicate()
            code, err = -9, err + f"\ntimed out after {timeout_s} s".encode()
    return {
        "argv": [os.path.basename(argv[0]), *argv[1:]],
        "returncode": code,
        "stdout": out.decode("utf-8", "replace")[-4_000_000:],
        "stderr": err.decode("utf-8", "replace")[-4000:],
        "duration_s": round(time.perf_counter() - started, 4),
    }


class StallClock:
    """Freezes the command at the stall deadline and snapshots it while frozen.

    spec (JSON-able): stall_after_s; last_at_s (a last, lighter snapshot this long after
    the start, before the hard timeout) or None; per_test (the deadline counts from a
    test's start, reported through the FIFO); out_dir (where the snapshot goes, as this
    process sees it); tools {"py-spy": path or None, "gcore": path or None}; tool_env
    (the tools' environment, None: this process's).
    """

    def __init__(self, spec):
        """Made before the command starts (the FIFO must exist when a test reports)."""
        self.spec = spec
        self.pid = 0  # the command, also its process group (it called setsid())
        self.started = 0.0  # perf_counter() at fork
        self.out_dir = spec["out_dir"]
        self.record: dict[str, Any] = {"per_test": bool(spec.get("per_test")), "snapshots": [], "tests": []}
        self._ended = threading.Event()
        self._lock = threading.Lock()  # held while frozen: the command is not reaped meanwhile
        self.per_test = bool(spec.get("per_test"))
        path = os.path.join(self.out_dir, FIFO_NAME)
        os.mkfifo(path, 0o600)
        # Read and write: the FIFO never reads as closed while no test holds it open.
        self._fifo = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        self._thread = threading.Thread(target=self._run, name="lagtrace-stall-clock", daemon=True)

    def start(self, pid, started):
        self.pid, self.started = pid, started
        self._thread.start()

    def _now(self):
        return time.perf_counter() - self.started

    def _run(self):
        try:
            self._clock()
        except Exception as exc:  # the measurement must still end; the record says why
            self.record["error"] = f"{type(exc).__name__}: {exc}"

    def _wait(self, until):
        """Sleep until ``until`` (seconds since the start), reading test starts and ends
        meanwhile; returns the lines read, or None when the run ended."""
        while True:
            remaining = None if until is None else until - self._now()
            if remaining is not None and remaining <= 0:
                return []
            # No polling: stop() writes into the FIFO to wake this up (the clock must not
            # put load beside the command it measures).
            ready, _, _ = select.select([self._fifo], [], [], remaining)
            if self._ended.is_set():
                return None
            if ready:
                try:
                    data = os.read(self._fifo, 65536).decode("utf-8", "replace")
                except BlockingIOError:
                    continue
                return [line.split(" ", 2) for line in data.splitlines() if line.count(" ") >= 2]

    def _clock(self):
        after = self.spec["stall_after_s"]
        last_at = self.spec.get("last_at_s")
        deadline = None if self.per_test else after  # per test: armed by its start
        current = None  # the test whose clock runs: (pid, node id, started_s)
        stalled = False
        looks: GilLooks | None = None
        next_look, interval = None, GIL_SAMPLE_INTERVAL_S
        while True:
            if deadline is not None and looks is None and not stalled:
                # Toward the deadline, repeated looks at which threads wait for the GIL
                # (services/measure/probes/core.py reads them), between which the clock
                # still reads test starts and ends: the freeze then comes on time.
                begun = current[2] if current is not None else 0.0
                looks = GilLooks(self.pid, current[0] if current is not None else None)
                next_look = max(begun, deadline - look_window(after))
                interval = max(GIL_SAMPLE_INTERVAL_S, (deadline - next_look) / GIL_SAMPLES)
            due = [t for t in (next_look, deadline, last_at) if t is not None]
            lines = self._wait(min(due) if due else None)
            if lines is None:
                return
            now = self._now()
            for event, pid, node in lines:
                if event == CRASH and pid.isdigit():
                    # The process waits, stopped, in its signal handler: take it now.
                    self._snapshot(CRASH, now, current, crashed=(int(pid), node))
                    return
                if not self.per_test:
                    continue
                if event == "start" and current is None and pid.isdigit():
                    current = (int(pid), node, now)
                    self.record["tests"].append({"pid": int(pid), "test": node, "started_s": round(now, 4)})
                    if not stalled:
                        deadline = now + after
                        looks, next_look = None, None  # a new test: new looks
                elif event == "end" and current is not None and current[1] == node:
                    self.record["tests"][-1]["ended_s"] = round(now, 4)
                    current = None
                    if not stalled:
                        deadline = None  # the test ended in time: no stall
                        next_look = None  # its looks stay in the record
            if lines:
                continue
            if looks is not None and next_look is not None and deadline is not None and next_look <= now < deadline:
                self._look(looks, current)
                next_look = now + interval if looks.looks < GIL_SAMPLES else None
                continue
            if deadline is not None and now >= deadline:
                self._snapshot(STALL, deadline, current)
                stalled, deadline, next_look = True, None, None
                if last_at is None:
                    return
            elif last_at is not None and now >= last_at:
                # The run is about to be killed at its timeout: a stall by any measure.
                self._snapshot(BEFORE_TIMEOUT if stalled else STALL, last_at, current)
                return

    def _look(self, looks, current):
        """One look at the Python processes' threads, without stopping them; the record
        holds the looks so far, so a run that ends before its deadline keeps them."""
        now = round(self._now(), 4)
        looks.look()
        if looks.looks == 1:
            self.record["gil_samples"] = {"started_s": now, "test": current[1] if current else None}
        self.record["gil_samples"].update(
            window_s=round(now - self.record["gil_samples"]["started_s"], 4),
            processes={str(pid): entry for pid, entry in looks.found.items()},
        )

    def _phases(self, phase):
        return any(s["phase"] == phase for s in self.record["snapshots"])

    def _snapshot(self, phase, deadline, current, crashed=None):
        with self._lock:
            if self._ended.is_set():
                return
            if crashed is not None:
                # Let it stop itself in its handler first: were the group's SIGSTOP to
                # come before its own, the thaw would leave it to stop itself for good.
                wait_stopped([crashed[0]])
            try:
                os.killpg(self.pid, signal.SIGSTOP)
            except ProcessLookupError:
                return
            frozen_at = self._now()
            snapshot = {
                "phase": phase,
                "deadline_s": round(deadline, 4),
                "freeze_delay_s": round(frozen_at - deadline, 6),
                "test": current[1] if current else None,
                "test_elapsed_s": round(frozen_at - current[2], 4) if current else None,
                "processes": [],
            }
            if crashed is not None:
                snapshot["crashed"] = {"pid": crashed[0], "signal": crashed[1].strip()[:16]}
            state = _stat(self.pid)
            if state is None or state[2] in "ZX":
                snapshot["ended"] = True  # it ended just as the clock fired
            tree = descendants(self.pid)
            strays = []
            for pid in tree[1:]:
                found = _stat(pid)
                if found is not None and found[1] != self.pid:
                    strays.append(pid)
                    try:
                        os.kill(pid, signal.SIGSTOP)
                    except ProcessLookupError:
                        pass
            stopped = wait_stopped(tree)
            snapshot["stop_wait_s"] = None if stopped is None else round(stopped, 6)
            try:
                self._take(snapshot, tree, phase, current)
            finally:
                for pid in strays:
                    try:
                        os.kill(pid, signal.SIGCONT)
                    except ProcessLookupError:
                        pass
                try:
                    os.killpg(self.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                snapshot["frozen_s"] = round(self._now() - frozen_at, 4)
                snapshot["elapsed_s"] = round(frozen_at, 4)
                self.record["snapshots"].append(snapshot)

    def _take(self, snapshot, tree, phase, current):
        processes = [describe(pid) for pid in tree]
        snapshot["processes"] = processes
        python = [p for p in processes if p["python"]]
        # The process running the test first, then the innermost (a wrapper's payload).
        tester = snapshot["crashed"]["pid"] if snapshot.get("crashed") else current[0] if current else None
        python.sort(key=lambda p: (p["pid"] != tester, -tree.index(p["pid"])))
        if len(python) > MAX_PROCESSES:
            snapshot["left_out"] = [p["pid"] for p in python[MAX_PROCESSES:]]
        tools = self.spec.get("tools", {})
        tool_env = self.spec.get("tool_env")
        for rank, process in enumerate(python[:MAX_PROCESSES]):
            pid = process["pid"]
            process["snapshot"] = True
            process["io"] = _read(f"/proc/{pid}/io")
            process["threads"] = threads_at(pid)
            if tools.get("py-spy"):
                # --nonblocking: the process is frozen already, and py-spy's own pause
                # (ptrace attach) fails on a stopped process.
                process["pyspy"] = run_tool(
                    [tools["py-spy"], "dump", "--json", "--nonblocking", "--pid", str(pid)], env=tool_env
                )
            if phase in (STALL, CRASH) and tools.get("gcore"):
                if rank < MAX_CORES:
                    prefix = os.path.join(self.out_dir, "core")
                    process["gcore"] = run_tool([tools["gcore"], "-o", prefix, str(pid)], env=tool_env)
                    process["core"] = f"{prefix}.{pid}"
                else:
                    process["gcore"] = None  # over MAX_CORES: left out on purpose

    def stop(self):
        """The command has ended (not reaped yet): wait out a snapshot in progress, then
        write the record. The caller reaps the command afterwards."""
        self._ended.set()
        try:
            os.write(self._fifo, b"ended 0 -\n")
        except OSError:
            pass  # full of lines nobody read: the clock wakes up to read them anyway
        with self._lock:
            pass
        self._thread.join(timeout=5.0)
        os.close(self._fifo)
        self.record["ended_s"] = round(self._now(), 4)
        # The command can write where the record goes: never follow what it put there.
        path = os.path.join(self.out_dir, CLOCK_FILE)
        try:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except OSError:
            return  # the reader then says the clock left no record
        with os.fdopen(fd, "w") as handle:
            json.dump(self.record, handle)


def wait_unreaped(pid):
    """Block until the command has ended, leaving it a zombie (WNOWAIT): a snapshot in
    progress keeps seeing its process, and the caller reaps it (wait4) afterwards."""
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
