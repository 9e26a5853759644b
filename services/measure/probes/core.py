"""The stall snapshot: at the stall deadline the process that owns the run's clock
freezes the command's whole process group, takes py-spy dump, /proc I/O counters and a
core (`gcore`) of every Python process in it while frozen, and thaws it
(executors/stall_clock.py StallClock). After the run, gdb reads each core (`info
threads`, `thread apply all py-bt`, `thread apply all bt`) into threads with their
Python frames and a flag for those "Waiting for the GIL".

gdb's py-bt comes from the interpreter's gdb extension (python3.X-gdb.py; Debian ships
it in python3.X-dbg). Where gdb has none, pystack reads the Python stacks from the same
core instead, and the evidence says which reader was used and why.
"""

from __future__ import annotations

import json
import os
import platform
import re
import time
from pathlib import Path
from typing import Any

from services.evidence import (
    EvidenceKind,
    GdbContent,
    ProcIoContent,
    PySpyDumpContent,
    StallContent,
)
from services.measure.executors import stall_clock as clock
from services.measure.executors.base import ProcessHandle, RunResult
from services.measure.probes import procio, pyspy
from services.measure.probes.base import (
    FAILED,
    NO_STALL,
    PROCESS_GONE_MARKERS,
    PTRACE_DENIED_MARKERS,
    ArtifactFile,
    EvidenceDraft,
    Probe,
    ProbeContext,
    tool_failure,
    unavailable,
)
from services.measure.probes.stall import HOOK_DIR, install_plugin

GDB_KIND = EvidenceKind.gdb
STALL_KIND = EvidenceKind.stall
CORE_PREFIX = "core"
GCORE_TIMEOUT_S = 60.0
GDB_TIMEOUT_S = 120.0
NATIVE_FRAMES_KEPT = 12
MARK = "@@lagtrace "
SECTIONS = ("info-threads", "py-bt", "bt")
NO_PY_BT = 'Undefined command: "py-bt"'


def gdb_command(gdb: str, executable: str, core: str, load_python_extension: bool = True) -> list[str]:
    argv = [gdb, "-batch", "-nx"]
    if load_python_extension:
        # The extension sits beside the interpreter (python3.11-gdb.py, from a source
        # build or pyenv) or in gdb's own auto-load directory (Debian's -dbg packages);
        # gdb only loads the former from directories declared safe.
        directory = os.path.dirname(executable)
        for safe in (directory, os.path.join(os.path.dirname(directory), "lib")):
            argv += ["-iex", f"add-auto-load-safe-path {safe}"]
    else:
        argv += ["-iex", "set auto-load python-scripts off"]
    argv += ["-ex", "set pagination off", "-ex", "set print frame-arguments none"]
    commands = ("info threads", "thread apply all py-bt", "thread apply all bt")
    for section, command in zip(SECTIONS, commands, strict=True):
        argv += ["-ex", f"echo {MARK}{section}\\n", "-ex", command]
    return [*argv, executable, core]


def split_sections(text: str) -> dict[str, str]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith(MARK):
            current = line[len(MARK) :].strip()
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    return {name: "\n".join(lines) for name, lines in sections.items()}


_INFO_THREAD = re.compile(
    r"^(?P<current>\*)?\s*(?P<id>\d+)\s+Thread 0x[0-9a-f]+ \(LWP (?P<lwp>\d+)\)"
    r"(?: \"(?P<name>[^\"]*)\")?\s+(?P<frame>.*)$"
)
_THREAD_HEADER = re.compile(r"^Thread (?P<id>\d+) \(Thread 0x[0-9a-f]+ \(LWP (?P<lwp>\d+)\)")
_PY_FRAME = re.compile(r'^\s+File "(?P<file>[^"]*)", line (?P<line>\d+), in (?P<function>.+)$')
_NATIVE_FRAME = re.compile(r"^#\d+\s+(?:0x[0-9a-f]+ in )?(?P<function>[^\s(]+)")


def _per_thread(section: str) -> dict[int, list[str]]:
    blocks: dict[int, list[str]] = {}
    current = None
    for line in section.splitlines():
        header = _THREAD_HEADER.match(line)
        if header:
            current = int(header["id"])
            blocks[current] = []
        elif current is not None:
            blocks[current].append(line)
    return blocks


def parse_gdb(text: str, errors: str = "") -> tuple[list[dict], bool]:
    """Threads (gdb's order) and whether py-bt was available (gdb says so on stderr)."""
    sections = split_sections(text)
    threads: dict[int, dict] = {}
    for line in sections.get("info-threads", "").splitlines():
        match = _INFO_THREAD.match(line)
        if match:
            threads[int(match["id"])] = {
                "id": int(match["id"]),
                "lwp": int(match["lwp"]),
                "name": match["name"],
                "current": bool(match["current"]),
                "waiting_for_gil": False,
                "frames": [],
                "native_frames": [],
            }
    py_bt_available = NO_PY_BT not in sections.get("py-bt", "") and NO_PY_BT not in errors
    for thread_id, lines in _per_thread(sections.get("py-bt", "")).items():
        thread = threads.get(thread_id)
        if thread is None:
            continue
        for line in lines:
            if line.strip() == "Waiting for the GIL":
                thread["waiting_for_gil"] = True
            frame = _PY_FRAME.match(line)
            if frame:
                thread["frames"].append(
                    {"function": frame["function"].strip(), "file": frame["file"], "line": int(frame["line"])}
                )
    for thread_id, lines in _per_thread(sections.get("bt", "")).items():
        thread = threads.get(thread_id)
        if thread is None:
            continue
        natives = [m["function"] for m in map(_NATIVE_FRAME.match, lines) if m]
        if "<signal" in natives:
            # A crash caught by lagtrace's hook: the frames that matter are the faulting
            # ones below the signal frame, not the handler's above it.
            natives = ["<signal handler called>", *natives[len(natives) - natives[::-1].index("<signal") :]]
        thread["native_frames"] = natives[:NATIVE_FRAMES_KEPT]
        # Also true without py-bt: CPython blocks in take_gil while it waits for the GIL.
        if "take_gil" in natives:
            thread["waiting_for_gil"] = True
    return list(threads.values()), py_bt_available


_PYSTACK_THREAD = re.compile(r"^Traceback for thread (?P<lwp>\d+)(?: \((?P<name>[^)]*)\))? \[(?P<flags>[^\]]*)\]")
_PYSTACK_FRAME = re.compile(
    r'^\s+\((?P<lang>Python|C)\) File "(?P<file>[^"]*)", line (?P<line>\d+), in (?P<function>\S+)'
)


def parse_pystack(text: str) -> dict[int, dict]:
    """pystack's threads by LWP: Python frames innermost first, GIL flags."""
    threads: dict[int, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    for line in text.splitlines():
        header = _PYSTACK_THREAD.match(line)
        if header:
            current = {
                "frames": [],
                "native": [],
                "holds_gil": "Has the GIL" in header["flags"],
                "flags": header["flags"],
            }
            threads[int(header["lwp"])] = current
            continue
        frame = _PYSTACK_FRAME.match(line)
        if frame and current is not None:
            if frame["lang"] == "Python":
                current["frames"].append(
                    {"function": frame["function"], "file": frame["file"], "line": int(frame["line"])}
                )
            else:
                current["native"].append(frame["function"])
    for thread in threads.values():
        thread["frames"].reverse()  # pystack prints most recent last
        thread["waiting_for_gil"] = "take_gil" in thread["native"] or "Waiting for the GIL" in thread["flags"]
    return threads


RECORD_LIMIT = 64 * 2**20  # the clock's record (py-spy's JSON of up to 8 processes)
# The syscall a thread sits in while frozen: futex is how CPython waits for the GIL (and
# for locks, queues, conditions); -1 means it was running user code.
FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine(), 202)


def thread_states(threads: list[dict]) -> dict[int, str]:
    """By thread id: running (user code), waiting (futex) or in syscall N, as frozen."""
    states = {}
    for thread in threads:
        syscall = thread.get("syscall")
        if syscall is None:
            continue
        states[thread["tid"]] = "running" if syscall == -1 else "waiting" if syscall == FUTEX else f"syscall {syscall}"
    return states


def read_record(path: Path) -> dict | None:
    """The clock's record, written by the command's side of the run: read without
    following a link planted there, and size-capped."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(RECORD_LIMIT + 1)
    if len(data) > RECORD_LIMIT:
        return None
    try:
        record = json.loads(data)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _program(process: dict) -> str:
    exe = (process.get("exe") or "").replace(" (deleted)", "")
    if exe:
        return os.path.basename(exe)
    argv = process.get("cmdline") or []
    return os.path.basename(argv[0]) if argv else f"process {process.get('pid')}"


def _waiting(draft: EvidenceDraft) -> int:
    content = draft.content
    return content.waiting_for_gil or 0 if isinstance(content, GdbContent) else 0


def _why(tool_run: dict | None, tool: str) -> str:
    """A tool's failure in a user's words: no paths, no raw error strings."""
    if tool_run is None:
        return f"{tool} is not installed where the command runs"
    output = tool_run.get("stderr", "") + tool_run.get("stdout", "")
    if tool_run.get("returncode") == -9 and "timed out" in output:
        return f"{tool} did not finish in time"
    if any(marker in output for marker in PROCESS_GONE_MARKERS) or "No such file" in output:
        return "the process had already ended"
    if any(marker in output for marker in PTRACE_DENIED_MARKERS):
        return f"{tool} was not permitted to read the process (ptrace denied)"
    if tool_run.get("returncode") == 127:
        return f"{tool} could not be started"
    return f"{tool} failed (exit status {tool_run.get('returncode')})"


def gil_samples(record: dict) -> dict | None:
    """The clock's looks at the threads before the deadline, checked (the record sits
    where the command could write)."""
    found = record.get("gil_samples")
    if not isinstance(found, dict) or not isinstance(found.get("processes"), dict):
        return None
    processes = []
    for pid, entry in found["processes"].items():
        if not str(pid).isdigit() or not isinstance(entry, dict):
            continue
        threads = entry.get("threads")
        if not isinstance(threads, dict):
            threads = {}
        processes.append(
            {
                "pid": int(pid),
                "samples": int(entry.get("samples") or 0),
                "with_waiter": int(entry.get("with_waiter") or 0),
                "threads": {str(k): int(v) for k, v in threads.items() if isinstance(v, int)},
                "gil_found": bool(entry.get("gil_found")),
            }
        )
    return {
        "started_s": found.get("started_s"),
        "window_s": found.get("window_s"),
        "test": found.get("test"),
        "processes": processes,
    }


def describe_gil_samples(samples: dict) -> str:
    best = max(samples["processes"], key=lambda p: (p["with_waiter"], p["samples"]), default=None)
    if best is None or not best["samples"]:
        return "no look at the threads before the deadline found a Python process"
    if not best["gil_found"]:
        return f"{best['samples']} looks at the threads of pid {best['pid']}; its interpreter's GIL was not found"
    return (
        f"{best['samples']} looks at the threads of pid {best['pid']} before the deadline: a thread waited "
        f"for the GIL in {best['with_waiter']} of them"
    )


class CoreProbe(Probe):
    ptrace = True  # py-spy dump, gcore and gdb attach to the frozen command
    """The `core` evidence run: the stall snapshot, taken by the run's stall clock."""

    name = "core"
    kind = STALL_KIND

    def __init__(self, context: ProbeContext, load_python_extension: bool = True):
        super().__init__(context)
        self.load_python_extension = load_python_extension
        self.record: dict | None = None
        self.gdb: dict[int, EvidenceDraft] = {}  # by pid: each core read after the run
        self.timings: dict[str, float] = {}
        self._handle: ProcessHandle | None = None

    def stall_clock(self) -> dict[str, Any]:
        executor = self.context.executor
        timeout, lead = self.context.timeout_s, self.context.last_snapshot_lead_s
        return {
            "stall_after_s": self.context.stall_after_s,
            "last_at_s": timeout - lead if timeout is not None and timeout > 2 * lead else None,
            "per_test": self.context.per_test,
            "out_dir": executor.visible_path(self.context.run_dir),
            "tools": {"py-spy": executor.tool_path("py-spy"), "gcore": executor.tool_path("gcore")},
        }

    def env(self) -> dict[str, str]:
        # A crash (SIGSEGV, SIGABRT) prints every thread's Python stack to the output.
        # The crash hook (and under pytest the per-test clock's plugin) reach the clock
        # through its FIFO.
        env = {"PYTHONFAULTHANDLER": "1"}
        env.update(install_plugin(self.context.run_dir, self.visible(HOOK_DIR), self.visible(clock.FIFO_NAME)))
        return env

    def watcher(self) -> CoreProbe:
        return self

    # RunWatcher: the clock runs in the executor; after the run (tools still usable,
    # e.g. inside the lingering container) gdb reads the cores.
    def started(self, handle: ProcessHandle) -> None:
        self._handle = handle

    def finished(self) -> None:
        self.record = read_record(self.context.run_dir / clock.CLOCK_FILE)
        if self.record is None or self._handle is None:
            return
        for snapshot in self.record.get("snapshots", []):
            for process in snapshot.get("processes", []):
                run = process.get("gcore")
                if not isinstance(process.get("pid"), int) or not isinstance(run, dict):
                    continue
                if run.get("returncode") == 0 and "Saved corefile" in str(run.get("stdout")) + str(run.get("stderr")):
                    self.gdb[process["pid"]] = self._read_core(self._handle, process, snapshot)

    def _read_core(self, handle: ProcessHandle, process: dict, snapshot: dict) -> EvidenceDraft:
        started = time.perf_counter()
        # The record sits where the command can write: the core's path is ours, not its.
        pid, executable = process["pid"], process.get("exe")
        core_path = f"{self.visible(CORE_PREFIX)}.{pid}"
        core_name = f"{CORE_PREFIX}.{pid}"
        content: dict[str, Any] = {
            "pid": pid,
            "program": _program(process),
            "executable": executable,
            "elapsed_s": snapshot.get("elapsed_s"),
        }
        gdb = self.context.executor.tool_path("gdb")
        text = ""
        threads: list[dict] = []
        py_bt = False
        if gdb is None:
            content["gdb"] = "gdb is not installed where the command runs"
        elif not executable:
            content["gdb"] = "the command's executable could not be read from /proc/PID/exe"
        else:
            result = handle.run_tool(
                gdb_command(gdb, executable, core_path, self.load_python_extension), timeout_s=GDB_TIMEOUT_S
            )
            text = result.stdout + ("\n" + result.stderr if result.stderr.strip() else "")
            threads, py_bt = parse_gdb(result.stdout, result.stderr)
            content["gdb_s"] = round(result.duration_s, 4)
            if not threads:
                return tool_failure(GDB_KIND, "gdb", result, pid=pid)
        content["reader"] = "gdb" if py_bt else "gdb+pystack"
        if not py_bt:
            content["py_bt"] = (
                "gdb has no py-bt command: the interpreter's gdb extension (python3.X-gdb.py, "
                "Debian package python3.X-dbg) is not installed or not loaded"
            )
            threads, fallback_text = self._pystack(handle, threads, core_path, executable)
            text += fallback_text
        for thread in threads:  # the crash hook's own frames sit on top of a crashed thread
            while thread["frames"] and HOOK_DIR in str(thread["frames"][0]["file"]):
                thread["frames"].pop(0)
        content["threads"] = threads
        content["waiting_for_gil"] = sum(1 for t in threads if t["waiting_for_gil"])
        host_core = self.context.run_dir / core_name
        handle.copy_out(core_path, host_core)
        content["analysis_s"] = round(time.perf_counter() - started, 4)
        return EvidenceDraft(
            kind=GDB_KIND,
            content=GdbContent.model_validate(content),
            text=text,
            files=[ArtifactFile(core_name, host_core, "application/x-core")],
        )

    def _pystack(
        self, handle: ProcessHandle, gdb_threads: list[dict], core_path: str, executable: str | None
    ) -> tuple[list[dict], str]:
        pystack = self.context.executor.tool_path("pystack")
        if pystack is None:
            for thread in gdb_threads:
                thread["frames_note"] = "no Python frames: neither py-bt nor pystack is available"
            return gdb_threads, ""
        argv = [pystack, "core", "--no-color", "--native-last", core_path]
        if executable:
            argv.append(executable)
        result = handle.run_tool(argv, timeout_s=GDB_TIMEOUT_S)
        by_lwp = parse_pystack(result.stdout)
        if not gdb_threads:
            gdb_threads = [
                {
                    "id": i + 1,
                    "lwp": lwp,
                    "name": None,
                    "current": False,
                    "waiting_for_gil": False,
                    "frames": [],
                    "native_frames": t["native"][:NATIVE_FRAMES_KEPT],
                }
                for i, (lwp, t) in enumerate(by_lwp.items())
            ]
        for thread in gdb_threads:
            found = by_lwp.get(thread["lwp"])
            if found:
                thread["frames"] = found["frames"]
                thread["holds_gil"] = found["holds_gil"]
                thread["waiting_for_gil"] = thread["waiting_for_gil"] or found["waiting_for_gil"]
        return gdb_threads, "\n--- pystack core ---\n" + result.stdout + result.stderr

    def collect(self, result: RunResult) -> list[EvidenceDraft]:
        base: dict[str, Any] = {
            "comparison": self.context.comparison or None,
            "stall_after_s": self.context.stall_after_s,
            "clock": "test" if self.context.per_test else "process",
            "wall_s": result.wall_s,
            "timed_out": result.timed_out,
        }
        record = self.record or read_record(self.context.run_dir / clock.CLOCK_FILE)
        if record is None:
            reason = "the stall clock left no record: the run could not be watched"
            return [unavailable(STALL_KIND, reason, FAILED, **base)]
        tests = record.get("tests", [])
        if tests:
            base["test_started_s"] = tests[0]["started_s"]
        snapshots = record.get("snapshots", [])
        base["phases"] = [s["phase"] for s in snapshots]
        stall = next((s for s in snapshots if s["phase"] == clock.STALL), None)
        crash = next((s for s in snapshots if s["phase"] == clock.CRASH), None)
        drafts: list[EvidenceDraft] = []
        for snapshot in snapshots:
            drafts.extend(self._snapshot_drafts(snapshot))
        drafts.extend(self.gdb.values())
        if stall is None and crash is not None:
            signal_name = crash.get("crashed", {}).get("signal", "a fatal signal")
            reason = (
                f"the run crashed ({signal_name}) after {crash['elapsed_s']:.3f} s, before the stall threshold "
                f"of {self.context.stall_after_s:.3f} s; its stacks were taken at the crash"
            )
            extra = {**base, "crash_signal": signal_name, "elapsed_s": crash["elapsed_s"], **self._captured(crash)}
            return [unavailable(STALL_KIND, reason, NO_STALL, **extra), *drafts]
        samples = gil_samples(record)
        if stall is None:
            # The looks at the threads taken before the run ended are kept: the drill
            # may keep them when no attempt reaches the deadline.
            looked = {"gil_samples": samples} if samples is not None else {}
            return [unavailable(STALL_KIND, self._no_stall_reason(result, tests), NO_STALL, **base, **looked)]
        content = {
            **base,
            "status": "ok",
            "elapsed_s": stall["elapsed_s"],
            "test": stall.get("test"),
            "test_elapsed_s": stall.get("test_elapsed_s"),
            "freeze_delay_s": stall["freeze_delay_s"],
            "frozen_s": stall["frozen_s"],
            "processes": [
                {
                    "pid": p["pid"],
                    "program": _program(p),
                    "python": p["python"],
                    "snapshotted": bool(p.get("snapshot")),
                }
                for p in stall["processes"]
            ],
            **self._captured(stall),
        }
        if samples is not None:
            content["gil_samples"] = samples
            content["captured"] = [*content["captured"], describe_gil_samples(samples)]
        return [EvidenceDraft(kind=STALL_KIND, content=StallContent.model_validate(content)), *drafts]

    def _no_stall_reason(self, result: RunResult, tests: list[dict]) -> str:
        threshold = self.context.stall_after_s
        if not self.context.per_test:
            return (
                f"the run ended after {result.wall_s:.3f} s, before the stall threshold of "
                f"{threshold:.3f} s: nothing to snapshot"
            )
        if not tests:
            return (
                "the test never started (or pytest did not load lagtrace's stall-clock plugin): "
                f"the run ended after {result.wall_s:.3f} s with nothing to snapshot"
            )
        took = [t["ended_s"] - t["started_s"] for t in tests if "ended_s" in t]
        longest = max(took, default=0.0)
        return (
            f"the test took {longest:.3f} s, less than the stall threshold of {threshold:.3f} s "
            f"counted from its start: nothing to snapshot"
        )

    def _snapshot_drafts(self, snapshot: dict) -> list[EvidenceDraft]:
        drafts = []
        phase, elapsed = snapshot["phase"], snapshot["elapsed_s"]
        for process in snapshot.get("processes", []):
            if not process.get("snapshot"):
                continue
            pid = process["pid"]
            where = {"pid": pid, "program": _program(process), "phase": phase, "elapsed_s": elapsed}
            states = thread_states(process.get("threads") or [])
            dump = process.get("pyspy")
            if dump is None:
                drafts.append(unavailable(pyspy.DUMP_KIND, _why(None, "py-spy"), **where))
            elif dump["returncode"] != 0:
                drafts.append(unavailable(pyspy.DUMP_KIND, _why(dump, "py-spy"), FAILED, **where))
            else:
                try:
                    threads = pyspy.parse_dump(dump["stdout"])
                except ValueError:
                    drafts.append(unavailable(pyspy.DUMP_KIND, "py-spy dump printed no stacks", FAILED, **where))
                else:
                    for thread in threads:
                        # The crash hook's own frame sits on top of the crashing thread.
                        while thread["frames"] and HOOK_DIR in str(thread["frames"][0]["file"]):
                            thread["frames"].pop(0)
                        # Frozen, every thread is stopped: the kernel says what each was doing.
                        kernel = states.get(thread["id"])
                        if kernel is not None:
                            thread["active"] = kernel == "running"
                            thread["state"] = kernel + ("+gil" if thread["owns_gil"] else "")
                    holder = next((t for t in threads if t["owns_gil"]), None)
                    drafts.append(
                        EvidenceDraft(
                            kind=pyspy.DUMP_KIND,
                            content=PySpyDumpContent.model_validate(
                                {
                                    **where,
                                    "threads": threads,
                                    "gil_holder": (holder["name"] or holder["id"]) if holder else None,
                                    "duration_s": dump["duration_s"],
                                }
                            ),
                            text=pyspy.render_dump(threads),
                        )
                    )
            io_text = process.get("io")
            if not io_text:
                reason = "the process's /proc io could not be read (it had ended, or reading it is not permitted)"
                drafts.append(unavailable(procio.KIND, reason, FAILED, **where))
            else:
                counters = procio.parse(io_text)
                drafts.append(
                    EvidenceDraft(
                        kind=procio.KIND,
                        content=ProcIoContent.model_validate(
                            {**where, "counters": counters, **procio.derived(counters)}
                        ),
                        text=io_text,
                    )
                )
        return drafts

    def _captured(self, snapshot: dict) -> dict[str, Any]:
        """What the snapshot holds and what it lacks, each in a user's words."""
        processes = snapshot.get("processes", [])
        taken = [p for p in processes if p.get("snapshot")]
        captured: list[str] = []
        missing: list[str] = []
        if snapshot.get("ended"):
            missing.append("the command had already ended when the clock fired")
        if not taken:
            programs = ", ".join(sorted({_program(p) for p in processes})) or "none"
            missing.append(f"no Python process in the command's process tree (programs: {programs})")
        dumps = [p for p in taken if p.get("pyspy") and p["pyspy"]["returncode"] == 0]
        ios = [p for p in taken if p.get("io")]
        cores = [p for p in taken if p["pid"] in self.gdb and self.gdb[p["pid"]].content.ok]
        count = len(taken)
        if dumps:
            captured.append(f"py-spy dump of {len(dumps)} of {count} Python process(es) (every thread, GIL holder)")
        if ios:
            captured.append(f"/proc io of {len(ios)} of {count} Python process(es)")
        if cores:
            waiting = sum(_waiting(self.gdb[p["pid"]]) for p in cores)
            captured.append(
                f"a core of {len(cores)} of {count} Python process(es), read by gdb "
                f"({waiting} thread(s) waiting for the GIL)"
            )
        for process in taken:
            name = f"{_program(process)} (pid {process['pid']})"
            if process not in dumps:
                missing.append(f"py-spy dump of {name}: {_why(process.get('pyspy'), 'py-spy')}")
            if process not in ios:
                missing.append(f"/proc io of {name}: it could not be read")
            if process in cores:
                continue
            if "gcore" not in process:
                reason = _why(None, "gcore")
            elif process["gcore"] is None:
                reason = f"left out (cores are taken of the first {clock.MAX_CORES} only)"
            elif process["gcore"]["returncode"] != 0:
                reason = _why(process["gcore"], "gcore")
            else:
                reason = "gdb could not read the core"
            missing.append(f"core of {name}: {reason}")
        for pid in snapshot.get("left_out", []):
            missing.append(f"process {pid}: left out (at most {clock.MAX_PROCESSES} Python processes are snapshotted)")
        return {"captured": captured, "not_captured": missing}
