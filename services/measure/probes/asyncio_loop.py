"""asyncio_loop: how long event-loop callbacks held the loop, and what they were blocked in.

asyncio's debug mode reports a slow callback (PYTHONASYNCIODEBUG=1, `Executing <Task
...> took 0.120 seconds`) but names the task, not the blocking call, and only past
100 ms. This probe installs a `sitecustomize` hook (as the faulthandler probe does)
that wraps `asyncio.events.Handle._run` once asyncio is imported. It keeps:

- every callback's duration, by bucket, and the callbacks from the floor on
  (Thresholds.event_loop_blocked_floor_s) by description, with their time in all: what
  the loop lost is the sum, and 120 callbacks of 15 ms block it 1.8 s though none is
  long;
- a heartbeat on each loop (a timer every HEARTBEAT_S, cancelled when the loop stops):
  how late it fired is the loop's lag as a coroutine experiences it;
- the callbacks from HEAVY_S on (below the floor too): their count, time and the loop
  thread's CPU time in them. Many callbacks under the floor that each compute for a few
  milliseconds block the loop as one long one does, and the heartbeat sees it; a callback
  that waited for the GIL another thread held grows as long but computes nothing, so the
  CPU time tells the loop's own work from a wait (services/diagnose/event_loop_blocked.py);
- for a callback past SLOW_CALLBACK_S, the loop thread's stack (`sys._current_frames`,
  taken by a watchdog thread while it is stuck), which is the blocking call itself (a
  synchronous logging handler, a `requests.get`, a `time.sleep`).

Each process writes its report as JSON at exit (docs/explanations/evidence.md).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict

from services.evidence import AsyncioLoopContent, EvidenceKind
from services.measure.executors.base import RunResult
from services.measure.probes.base import EvidenceDraft, Probe, unavailable
from services.measure.probes.hooks import install_hook
from services.thresholds import Thresholds

KIND = EvidenceKind.asyncio_loop
HOOK_DIR = "asyncio-hook"
OUTPUT_PREFIX = "asyncio-loop"
# The stacks are taken from here: 20 ms is a frame of a 50 Hz UI and a fifth of asyncio
# debug mode's own slow_callback_duration, and two py-spy samples at 100 Hz.
SLOW_CALLBACK_S = 0.02
# The heartbeat's period: a fraction of the floor's multiples, and at 200 wake-ups a second
# an idle loop's cost stays in the tens of microseconds per beat.
HEARTBEAT_S = 0.005
# A healthy loop's callbacks take microseconds to about 1 ms (Thresholds,
# event_loop_blocked_floor_s): from here a callback's CPU time is read (two clock reads).
HEAVY_S = 0.001
# Bucket edges of the durations and lags; the floor and SLOW_CALLBACK_S are added.
EDGES_S = (0.001, 0.002, 0.01, 0.05, 0.1, 0.2, 0.5, 1.0)
TOP = 5

SITECUSTOMIZE = '''\
"""Installed by lagtrace for one evidence run: how long asyncio callbacks hold the loop."""
import atexit
import bisect
import json
import os
import re
import sys
import threading
import time

_threshold = float(os.environ["LAGTRACE_ASYNCIO_SLOW_S"])
_floor = float(os.environ["LAGTRACE_ASYNCIO_FLOOR_S"])
_period = float(os.environ["LAGTRACE_ASYNCIO_HEARTBEAT_S"])
_edges = [float(edge) for edge in os.environ["LAGTRACE_ASYNCIO_EDGES_S"].split(",")]
_path = "%s.%d.json" % (os.environ["LAGTRACE_ASYNCIO_PREFIX"], os.getpid())
_running = {}  # loop thread id -> [callback description, start, stack or None]
_slow = []
_heavy_from = float(os.environ.get("LAGTRACE_ASYNCIO_HEAVY_S", "0.001"))
_state = {"callbacks": 0, "patched": False, "looped": False}
_heavy = {"count": 0, "total_s": 0.0, "cpu_s": 0.0}  # callbacks from _heavy_from on
_durations = [[0, 0.0] for _ in range(len(_edges) + 1)]  # per bucket: count, seconds
_lags = [[0, 0.0] for _ in range(len(_edges) + 1)]
_heartbeat = {"beats": 0, "lag_total_s": 0.0, "lag_max_s": 0.0, "late_beats": 0}
_held = {}  # description, its task's name left out -> [count, seconds, longest, lag]
_HELD_KEYS = 1000
_TASK_NAME = re.compile(r"^Task [^:]*: ")
_BEAT = "_lagtrace_heartbeat"  # the loop's heartbeat: [due, timer handle, longest s, its key]
_unbeatable = set()  # ids of loops that take no attribute (no heartbeat there)


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


def _add(buckets, seconds):
    bucket = buckets[bisect.bisect_left(_edges, seconds)]
    bucket[0] += 1
    bucket[1] += seconds


def _beat(loop):
    state = getattr(loop, _BEAT, None)
    if state is None:
        return
    now = loop.time()
    lag = max(0.0, now - state[0])
    _heartbeat["beats"] += 1
    _heartbeat["lag_total_s"] += lag
    _heartbeat["lag_max_s"] = max(_heartbeat["lag_max_s"], lag)
    _add(_lags, lag)
    if lag >= _floor:
        _heartbeat["late_beats"] += 1
        if state[3] is not None and state[3] in _held:
            _held[state[3]][3] += lag
    state[0], state[2], state[3] = now + _period, 0.0, None
    state[1] = loop.call_at(state[0], _beat, loop)


def _start_beat(loop):
    if id(loop) in _unbeatable or getattr(loop, _BEAT, None) is not None:
        return
    state = [loop.time() + _period, None, 0.0, None]
    try:
        setattr(loop, _BEAT, state)
    except (AttributeError, TypeError):
        _unbeatable.add(id(loop))
        return
    state[1] = loop.call_at(state[0], _beat, loop)


def _patch(events):
    if _state["patched"]:
        return
    _state["patched"] = True
    original = events.Handle._run

    def _run(self):
        if self._callback is _beat:
            return original(self)
        loop = self._loop
        beat = getattr(loop, _BEAT, None) if loop is not None else None
        if beat is None and loop is not None:
            _start_beat(loop)
            beat = getattr(loop, _BEAT, None)
        ident = threading.get_ident()
        cpu = time.thread_time()
        entry = [self, time.perf_counter(), None]
        _running[ident] = entry
        _state["callbacks"] += 1
        try:
            return original(self)
        finally:
            _running.pop(ident, None)
            took = time.perf_counter() - entry[1]
            _add(_durations, took)
            if took >= _heavy_from:
                _heavy["count"] += 1
                _heavy["total_s"] += took
                _heavy["cpu_s"] += time.thread_time() - cpu
            if took >= _floor:
                key = _TASK_NAME.sub("Task ", _describe(self))
                if key not in _held and len(_held) >= _HELD_KEYS:
                    key = "other callbacks"
                held = _held.setdefault(key, [0, 0.0, 0.0, 0.0])
                held[0] += 1
                held[1] += took
                held[2] = max(held[2], took)
                if beat is not None and took > beat[2]:
                    beat[2], beat[3] = took, key
            if took >= _threshold and len(_slow) < 10000:
                _slow.append({"callback": _describe(self), "seconds": took, "stack": entry[2] or []})

    events.Handle._run = _run
    threading.Thread(target=_watch, name="lagtrace-asyncio-watchdog", daemon=True).start()


def _patch_loop(base_events):
    """A loop that stops drops its heartbeat: a beat due while it stood stopped (between
    two run_until_complete calls) would read the pause as lag."""
    if _state["looped"]:
        return
    _state["looped"] = True
    original = base_events.BaseEventLoop.run_forever

    def run_forever(self):
        try:
            return original(self)
        finally:
            state = getattr(self, _BEAT, None)
            if state is not None:
                try:
                    delattr(self, _BEAT)
                except AttributeError:
                    pass
                if state[1] is not None:
                    state[1].cancel()

    base_events.BaseEventLoop.run_forever = run_forever


def _write():
    if _state["patched"]:
        with open(_path, "w") as out:
            report = {
                "pid": os.getpid(),
                "threshold_s": _threshold,
                "floor_s": _floor,
                "heartbeat_s": _period,
                "edges_s": _edges,
                "callbacks": _state["callbacks"],
                "durations": _durations,
                "lags": _lags,
                "heartbeat": _heartbeat,
                "heavy": dict(_heavy, from_s=_heavy_from),
                "held": _held,
            }
            json.dump(dict(report, slow=_slow), out)


atexit.register(_write)

_PATCHES = {"asyncio.events": _patch, "asyncio.base_events": _patch_loop}


class _AsyncioHook:
    """Patch asyncio.events and asyncio.base_events right after they are imported, so a
    program that never uses asyncio pays nothing."""

    def find_spec(self, name, path=None, target=None):
        patch = _PATCHES.get(name)
        if patch is None:
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
            patch(module)

        spec.loader.exec_module = _exec
        return spec

    def find_module(self, name, path=None):
        return None


sys.meta_path.insert(0, _AsyncioHook())
for _name, _patcher in _PATCHES.items():
    if _name in sys.modules:
        _patcher(sys.modules[_name])
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
        **_held(reports),
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


def _buckets(edges: list[float], reports: list[list[list[float]]]) -> list[dict]:
    """Per-process [count, seconds] buckets over the same edges, summed."""
    uppers: list[float | None] = [*edges, None]
    return [
        {
            "upper_s": upper,
            "count": sum(int(report[i][0]) for report in reports if i < len(report)),
            "total_s": round(sum(report[i][1] for report in reports if i < len(report)), 4),
        }
        for i, upper in enumerate(uppers)
    ]


def _held(reports: list[dict]) -> dict:
    """The loop's blocked time in all: every callback from the floor on, by description,
    worst total first; the durations of all callbacks and the heartbeat's lags by bucket.
    Nothing where the hook predates them (its reports kept only the slow callbacks)."""
    kept = [report for report in reports if "held" in report]
    if not kept:
        return {}
    callers: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for report in kept:
        for callback, (count, total, longest, lag) in report["held"].items():
            caller = callers[callback]
            caller[0] += count
            caller[1] += total
            caller[2] = max(caller[2], longest)
            caller[3] += lag
    ranked = sorted(callers.items(), key=lambda item: -item[1][1])
    beats = [report["heartbeat"] for report in kept]
    edges = kept[0]["edges_s"]
    same = [report for report in kept if report["edges_s"] == edges]
    return {
        "floor_s": kept[0]["floor_s"],
        "held_callbacks": int(sum(caller[0] for caller in callers.values())),
        "held_s": round(sum(caller[1] for caller in callers.values()), 4),
        "callers": [
            {
                "callback": callback,
                "count": int(count),
                "total_s": round(total, 4),
                "max_s": round(longest, 4),
                "lag_s": round(lag, 4),
            }
            for callback, (count, total, longest, lag) in ranked[:TASKS]
        ],
        "durations": _buckets(edges, [report["durations"] for report in same]),
        "heartbeat": {
            "period_s": kept[0]["heartbeat_s"],
            "beats": sum(beat["beats"] for beat in beats),
            "lag_total_s": round(sum(beat["lag_total_s"] for beat in beats), 4),
            "lag_max_s": round(max(beat["lag_max_s"] for beat in beats), 4),
            "late_beats": sum(beat["late_beats"] for beat in beats),
            "lags": _buckets(edges, [report["lags"] for report in same]),
        },
        **_heavy_callbacks(kept),
    }


def _heavy_callbacks(reports: list[dict]) -> dict:
    """The callbacks from HEAVY_S on, summed over the processes; nothing where the hook
    predates them."""
    heavy = [report["heavy"] for report in reports if "heavy" in report]
    if not heavy:
        return {}
    return {
        "heavy": {
            "from_s": heavy[0]["from_s"],
            "count": int(sum(entry["count"] for entry in heavy)),
            "total_s": round(sum(entry["total_s"] for entry in heavy), 4),
            "cpu_s": round(sum(entry["cpu_s"] for entry in heavy), 4),
        }
    }


def edges_s(floor_s: float) -> list[float]:
    return sorted({*EDGES_S, floor_s, SLOW_CALLBACK_S})


class AsyncioLoopProbe(Probe):
    name = KIND.value
    kind = KIND

    # The threshold's default: a probe runs before, and apart from, the rules' Thresholds.
    floor_s = Thresholds().event_loop_blocked_floor_s

    def env(self) -> dict[str, str]:
        return {
            **install_hook(self.context.run_dir / HOOK_DIR, self.visible(HOOK_DIR), SITECUSTOMIZE),
            "LAGTRACE_ASYNCIO_SLOW_S": str(SLOW_CALLBACK_S),
            "LAGTRACE_ASYNCIO_FLOOR_S": str(self.floor_s),
            "LAGTRACE_ASYNCIO_HEARTBEAT_S": str(HEARTBEAT_S),
            "LAGTRACE_ASYNCIO_HEAVY_S": str(HEAVY_S),
            "LAGTRACE_ASYNCIO_EDGES_S": ",".join(map(str, edges_s(self.floor_s))),
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
