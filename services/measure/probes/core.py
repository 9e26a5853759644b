"""The stall snapshot: py-spy dump, /proc I/O counters and a core taken with `gcore` while
the run is slow; after the run, gdb reads the core (`info threads`, `thread apply all
py-bt`, `thread apply all bt`) into threads with their Python frames and a flag for
those "Waiting for the GIL".

gdb's py-bt comes from the interpreter's gdb extension (python3.X-gdb.py; Debian ships
it in python3.X-dbg). Where gdb has none, pystack reads the Python stacks from the same
core instead, and the evidence says which reader was used and why.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

from services.measure.evidence import EvidenceKind, GdbContent, PySpyDumpContent, StallContent
from services.measure.executors.base import ProcessHandle, RunResult
from services.measure.probes import procio, pyspy
from services.measure.probes.base import (
    NO_STALL,
    ArtifactFile,
    EvidenceDraft,
    Probe,
    ProbeContext,
    missing_tool,
    tool_failure,
    unavailable,
)
from services.measure.probes.stall import STALL, StallWatcher

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
    threads: dict[int, dict] = {}
    current = None
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


class CoreSnapshot:
    """The stall snapshot's capture and analysis; its drafts are read after the run."""

    def __init__(self, context: ProbeContext, load_python_extension: bool = True):
        self.context = context
        self.executor = context.executor
        self.load_python_extension = load_python_extension
        self.drafts: list[EvidenceDraft] = []
        self.core_path: str | None = None  # as the tools see it
        self.executable: str | None = None
        self.pid: int | None = None
        self.trigger_elapsed_s: float | None = None
        self.timings: dict[str, float] = {}
        self._triggered_at = 0.0

    def take(self, handle: ProcessHandle, phase: str, elapsed_s: float) -> None:
        started = time.perf_counter()
        self.pid = handle.pid
        if phase == STALL:
            # Freeze first, then take the core: any tool that runs beside a hand-off
            # pathology lends it a busy core and can make it finish at once (seen here:
            # the process was gone before gcore had even attached). SIGSTOP costs one
            # syscall and keeps every thread exactly where the stall has it, e.g.
            # waiting for the GIL; the dump and counters come after SIGCONT.
            self._triggered_at = started
            self.trigger_elapsed_s = elapsed_s
            frozen = self._signal(handle, "STOP")
            try:
                self._gcore(handle)
            finally:
                if frozen:
                    self._signal(handle, "CONT")
            self.timings["frozen_s"] = round(time.perf_counter() - started, 4)
        dump = pyspy.dump(self.executor, handle, handle.pid)
        if isinstance(dump.content, PySpyDumpContent):
            dump.content.phase, dump.content.elapsed_s = phase, round(elapsed_s, 3)
        self.drafts.append(dump)
        self.drafts.append(procio.read(self.executor, handle, handle.pid, phase, elapsed_s))
        self.timings[f"{phase}_capture_s"] = round(time.perf_counter() - started, 4)

    def _signal(self, handle: ProcessHandle, signal_name: str) -> bool:
        kill = self.executor.tool_path("kill")
        if kill is None:
            return False
        return handle.run_tool([kill, f"-{signal_name}", str(handle.pid)], timeout_s=5.0).returncode == 0

    def _gcore(self, handle: ProcessHandle) -> None:
        gcore = self.executor.tool_path("gcore")
        if gcore is None:
            self.drafts.append(missing_tool(GDB_KIND, "gcore", self.executor))
            return
        readlink = self.executor.tool_path("readlink")
        if readlink is not None:
            exe = handle.run_tool([readlink, f"/proc/{handle.pid}/exe"], timeout_s=5.0)
            if exe.returncode == 0 and exe.stdout.strip():
                self.executable = exe.stdout.strip()
        prefix = self.context.executor.visible_path(self.context.run_dir / CORE_PREFIX)
        result = handle.run_tool([gcore, "-o", prefix, str(handle.pid)], timeout_s=GCORE_TIMEOUT_S)
        self.timings["gcore_s"] = round(result.duration_s, 4)
        if result.returncode != 0 or "Saved corefile" not in result.stdout + result.stderr:
            self.drafts.append(tool_failure(GDB_KIND, "gcore", result))
            return
        self.core_path = f"{prefix}.{handle.pid}"

    def analyse(self, handle: ProcessHandle) -> None:
        if self.core_path is None:
            return
        started = time.perf_counter()
        core_name = f"{CORE_PREFIX}.{self.pid}"
        content: dict[str, Any] = {
            "pid": self.pid,
            "executable": self.executable,
            "elapsed_s": round(self.trigger_elapsed_s or 0.0, 3),
        }
        text = ""
        gdb = self.executor.tool_path("gdb")
        threads: list[dict] = []
        py_bt = False
        if gdb is None:
            content["gdb"] = "gdb is not installed where the command runs"
        elif self.executable is None:
            content["gdb"] = "the command's executable could not be read from /proc/PID/exe"
        else:
            result = handle.run_tool(
                gdb_command(gdb, self.executable, self.core_path, self.load_python_extension), timeout_s=GDB_TIMEOUT_S
            )
            text = result.stdout + ("\n" + result.stderr if result.stderr.strip() else "")
            threads, py_bt = parse_gdb(result.stdout, result.stderr)
            self.timings["gdb_s"] = round(result.duration_s, 4)
            if not threads:
                self.drafts.append(tool_failure(GDB_KIND, "gdb", result))
                return
        content["reader"] = "gdb" if py_bt else "gdb+pystack"
        if not py_bt:
            content["py_bt"] = (
                "gdb has no py-bt command: the interpreter's gdb extension (python3.X-gdb.py, "
                "Debian package python3.X-dbg) is not installed or not loaded"
            )
            threads, fallback_text = self._pystack(handle, threads)
            text += fallback_text
        content["threads"] = threads
        content["waiting_for_gil"] = sum(1 for t in threads if t["waiting_for_gil"])
        host_core = self.context.run_dir / core_name
        handle.copy_out(self.core_path, host_core)
        self.timings["analysis_s"] = round(time.perf_counter() - started, 4)
        content["timings"] = dict(self.timings)
        self.drafts.append(
            EvidenceDraft(
                kind=GDB_KIND,
                content=GdbContent.model_validate(content),
                text=text,
                files=[ArtifactFile(core_name, host_core, "application/x-core")],
            )
        )

    def _pystack(self, handle: ProcessHandle, gdb_threads: list[dict]) -> tuple[list[dict], str]:
        pystack = self.executor.tool_path("pystack")
        if pystack is None:
            for thread in gdb_threads:
                thread["frames_note"] = "no Python frames: neither py-bt nor pystack is available"
            return gdb_threads, ""
        argv = [pystack, "core", "--no-color", "--native-last", self.core_path]
        if self.executable:
            argv.append(self.executable)
        result = handle.run_tool(argv, timeout_s=GDB_TIMEOUT_S)
        self.timings["pystack_s"] = round(result.duration_s, 4)
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


class CoreProbe(Probe):
    """The `core` evidence run: the stall snapshot, taken by a StallWatcher."""

    name = "core"
    kind = STALL_KIND

    def __init__(self, context: ProbeContext, load_python_extension: bool = True):
        super().__init__(context)
        self.snapshot = CoreSnapshot(context, load_python_extension)
        self._watcher = StallWatcher(
            self.snapshot, context.stall_after_s, context.timeout_s, context.last_snapshot_lead_s
        )

    def watcher(self) -> StallWatcher:
        return self._watcher

    def collect(self, result: RunResult) -> list[EvidenceDraft]:
        stall = {
            "stall_after_s": self.context.stall_after_s,
            "wall_s": result.wall_s,
            "timed_out": result.timed_out,
            "phases": list(self._watcher.phases),
            "timings": dict(self.snapshot.timings),
        }
        if not self._watcher.stalled:
            reason = (
                f"the run ended after {result.wall_s:.3f} s, before the stall threshold of "
                f"{self.context.stall_after_s:.3f} s: nothing to snapshot"
            )
            return [unavailable(STALL_KIND, reason, NO_STALL, **stall)]
        stall["elapsed_s"] = self.snapshot.trigger_elapsed_s
        return [EvidenceDraft(kind=STALL_KIND, content=StallContent.model_validate(stall)), *self.snapshot.drafts]
