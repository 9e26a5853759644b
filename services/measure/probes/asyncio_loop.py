"""asyncio_loop: event-loop callbacks that ran too long, and what they were blocked in.

asyncio's debug mode reports a slow callback (PYTHONASYNCIODEBUG=1, `Executing <Task
...> took 0.120 seconds`) but names the task, not the blocking call, and only past
100 ms. This probe installs a `sitecustomize` hook (as the faulthandler probe does)
that wraps `asyncio.events.Handle._run` once asyncio is imported: a watchdog thread
takes the loop thread's stack (`sys._current_frames`) when a callback has run past the
threshold, which is the blocking call itself (a synchronous logging handler, a
`requests.get`, a `time.sleep`). Each process writes its slow callbacks as JSON at exit.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict

from services.evidence import AsyncioLoopContent, EvidenceKind
from services.measure.executors.base import RunResult
from services.measure.probes.base import EvidenceDraft, Probe, unavailable
from services.measure.probes.hooks import install_hook

KIND = EvidenceKind.asyncio_loop
HOOK_DIR = "asyncio-hook"
OUTPUT_PREFIX = "asyncio-loop"
# A callback on a healthy loop takes microseconds to a few milliseconds; 20 ms is a
# frame of a 50 Hz UI and a fifth of asyncio debug mode's own slow_callback_duration.
SLOW_CALLBACK_S = 0.02
TOP = 5

SITECUSTOMIZE = '''\
"""Installed by lagtrace for one evidence run: report asyncio callbacks that block the loop."""
import atexit
import json
import os
import sys
import threading
import time

_threshold = float(os.environ["LAGTRACE_ASYNCIO_SLOW_S"])
_path = "%s.%d.json" % (os.environ["LAGTRACE_ASYNCIO_PREFIX"], os.getpid())
_running = {}  # loop thread id -> [callback description, start, stack or None]
_slow = []
_state = {"callbacks": 0, "patched": False}


def _describe(handle):
    callback = getattr(handle, "_callback", None)
    owner = getattr(callback, "__self__", None)
    get_coro = getattr(owner, "get_coro", None)
    if get_coro is not None:
        coro = get_coro()
        code = getattr(coro, "cr_code", None) or getattr(coro, "gi_code", None)
        where = " (%s:%d)" % (code.co_filename, code.co_firstlineno) if code else ""
        return "Task %s: %s%s" % (owner.get_name(), getattr(coro, "__qualname__", coro), where)
    code = getattr(callback, "__code__", None)
    if code is not None:
        return "%s (%s:%d)" % (getattr(callback, "__qualname__", callback), code.co_filename, code.co_firstlineno)
    return repr(callback)[:200]


def _stack(frame):
    frames = []
    while frame is not None and len(frames) < 40:
        code = frame.f_code
        frames.append({"function": code.co_name, "file": code.co_filename, "line": frame.f_lineno})
        frame = frame.f_back
    return frames


def _watch():
    while True:
        time.sleep(_threshold / 4)
        now = time.perf_counter()
        for ident, entry in list(_running.items()):
            if entry[2] is None and now - entry[1] >= _threshold:
                frame = sys._current_frames().get(ident)
                entry[2] = _stack(frame) if frame is not None else []


def _patch(events):
    if _state["patched"]:
        return
    _state["patched"] = True
    original = events.Handle._run

    def _run(self):
        ident = threading.get_ident()
        entry = [self, time.perf_counter(), None]
        _running[ident] = entry
        _state["callbacks"] += 1
        try:
            return original(self)
        finally:
            _running.pop(ident, None)
            took = time.perf_counter() - entry[1]
            if took >= _threshold and len(_slow) < 10000:
                _slow.append({"callback": _describe(self), "seconds": took, "stack": entry[2] or []})

    events.Handle._run = _run
    threading.Thread(target=_watch, name="lagtrace-asyncio-watchdog", daemon=True).start()


def _write():
    if _state["patched"]:
        with open(_path, "w") as out:
            report = {"pid": os.getpid(), "threshold_s": _threshold, "callbacks": _state["callbacks"]}
            json.dump(dict(report, slow=_slow), out)


atexit.register(_write)


class _AsyncioHook:
    """Patch asyncio.events right after it is imported, so a program that never uses
    asyncio pays nothing."""

    def find_spec(self, name, path=None, target=None):
        if name != "asyncio.events":
            return None
        sys.meta_path.remove(self)
        try:
            import importlib.util
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        exec_module = spec.loader.exec_module

        def _exec(module):
            exec_module(module)
            _patch(module)

        spec.loader.exec_module = _exec
        return spec

    def find_module(self, name, path=None):
        return None


if "asyncio.events" in sys.modules:
    _patch(sys.modules["asyncio.events"])
else:
    sys.meta_path.insert(0, _AsyncioHook())
'''


def blocking_frame(stack: list[dict]) -> dict | None:
    """The innermost frame of the loop thread's stack outside lagtrace's hook: the
    call the loop was stuck in (a C call such as time.sleep shows as its caller's line)."""
    for frame in stack:
        if "asyncio-hook" not in frame["file"]:
            return frame
    return None


# A task's own name ("Task-7") differs between runs and tasks of one coroutine.
TASK_NAME = re.compile(r"^Task [^:]*: ")
# The tasks kept, and the functions kept of each: enough to find a test's coroutine.
TASKS = 50
TASK_FUNCTIONS = 40


def summarize(reports: list[dict]) -> dict:
    """Slow callbacks of every process, grouped by the blocking call, worst total first,
    and by the task that ran them (``tasks``: which test's coroutine blocked the loop)."""
    groups: dict[str, dict] = defaultdict(lambda: {"count": 0, "total_s": 0.0, "max_s": 0.0})
    tasks: dict[str, dict] = defaultdict(lambda: {"count": 0, "total_s": 0.0, "functions": []})
    callbacks = 0
    slow_total = 0.0
    slow_count = 0
    for report in reports:
        callbacks += report.get("callbacks", 0)
        for slow in report.get("slow", []):
            frame = blocking_frame(slow.get("stack", []))
            where = f"{frame['function']} ({frame['file']}:{frame['line']})" if frame else slow["callback"]
            group = groups[where]
            group["count"] += 1
            group["total_s"] += slow["seconds"]
            group["max_s"] = max(group["max_s"], slow["seconds"])
            group.setdefault("callback", slow["callback"])
            group.setdefault("stack", [f"{f['function']} ({f['file']}:{f['line']})" for f in slow.get("stack", [])[:8]])
            task = tasks[TASK_NAME.sub("Task ", slow["callback"])]
            task["count"] += 1
            task["total_s"] += slow["seconds"]
            for f in slow.get("stack", []):
                function = f"{f['function']} ({f['file']})"
                if function not in task["functions"] and len(task["functions"]) < TASK_FUNCTIONS:
                    task["functions"].append(function)
            slow_total += slow["seconds"]
            slow_count += 1
    ranked = sorted(groups.items(), key=lambda item: -item[1]["total_s"])
    return {
        "callbacks": callbacks,
        "slow_callbacks": slow_count,
        "blocked_s": round(slow_total, 4),
        "blocking_calls": [
            {"call": where, **{k: round(v, 4) if isinstance(v, float) else v for k, v in group.items()}}
            for where, group in ranked[:TOP]
        ],
        "tasks": [
            {"callback": callback, **{k: round(v, 4) if isinstance(v, float) else v for k, v in task.items()}}
            for callback, task in sorted(tasks.items(), key=lambda item: -item[1]["total_s"])[:TASKS]
        ],
    }


class AsyncioLoopProbe(Probe):
    name = KIND.value
    kind = KIND

    def env(self) -> dict[str, str]:
        return {
            **install_hook(self.context.run_dir / HOOK_DIR, self.visible(HOOK_DIR), SITECUSTOMIZE),
            "LAGTRACE_ASYNCIO_SLOW_S": str(SLOW_CALLBACK_S),
            "LAGTRACE_ASYNCIO_PREFIX": self.visible(OUTPUT_PREFIX),
        }

    def collect(self, result: RunResult) -> list[EvidenceDraft]:
        reports = []
        for path in sorted(self.context.run_dir.glob(f"{OUTPUT_PREFIX}.*.json")):
            try:
                reports.append(json.loads(path.read_text()))
            except json.JSONDecodeError:
                continue  # a process killed while writing
        if not reports:
            return [unavailable(KIND, "no process of the command ran an asyncio event loop")]
        return [
            EvidenceDraft(
                kind=KIND,
                content=AsyncioLoopContent.model_validate(
                    {
                        "threshold_s": SLOW_CALLBACK_S,
                        "wall_s": result.wall_s,
                        "processes": len(reports),
                        **summarize(reports),
                    }
                ),
            )
        ]
