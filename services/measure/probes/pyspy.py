"""py-spy: `record` for a whole evidence run (flame graph + speedscope profile), and `dump`
for the stall snapshot (every thread's stack and state: idle, active, holding the GIL).

py-spy comes from its PyPI package (a static binary), so it also works bind-mounted
into a container whose image does not have it.
"""

from __future__ import annotations

import json
from collections import Counter

from services.evidence import EvidenceKind, PySpyDumpContent, PySpyRecordContent
from services.measure.executors.base import Executor, ProcessHandle, RunResult
from services.measure.probes import flamegraph
from services.measure.probes.base import (
    DENIED,
    FAILED,
    ArtifactFile,
    EvidenceDraft,
    TracerProbe,
    missing_tool,
    tool_failure,
    unavailable,
)

RECORD_KIND = EvidenceKind.pyspy
DUMP_KIND = EvidenceKind.pyspy_dump
PROFILE_FILE = "pyspy-profile.speedscope.json"
FLAMEGRAPH_FILE = "pyspy-flamegraph.svg"
RATE_HZ = 100  # py-spy's default: 1-17 % overhead measured here (docs/explanations/design.md)
TOP_FRAMES = 5
TOP_FUNCTIONS = 8
# Functions listed per thread by their time on the stack, beside the TOP_FUNCTIONS by own
# time. The hot path's differential sums a function over threads: one listed in one
# thread and cut from another's list sums too few seconds, and a starlette websocket
# test's route frame was named over the `_asgi_receive` loop it awaits, which one of its
# two portal threads had cut (the corpus's starlette_ws_suite, 7 Dec 2026).
ON_STACK_FUNCTIONS = 40


class PySpyRecordProbe(TracerProbe):
    name = RECORD_KIND.value
    kind = RECORD_KIND
    tool = "py-spy"
    stop_signal = "INT"  # py-spy writes its profile on Control-C, and ends the command

    def command(self, command: list[str]) -> list[str]:
        # --idle keeps threads that wait (for a lock, the GIL, I/O) in the profile: in a
        # latency problem the waiting is the story. --threads gives each thread its tower.
        # --subprocesses follows pytest-xdist workers and shell wrappers.
        return [
            self.found_tool,
            "record",
            "--idle",
            "--threads",
            "--subprocesses",
            "--rate",
            str(RATE_HZ),
            "--format",
            "speedscope",
            "--output",
            self.visible(PROFILE_FILE),
            "--",
            *command,
        ]

    def collect(self, result: RunResult) -> list[EvidenceDraft]:
        path = self.context.run_dir / PROFILE_FILE
        if not path.exists() or path.stat().st_size == 0:
            reason = "py-spy wrote no profile"
            if result.output_tail:
                reason += ": " + " / ".join(result.output_tail.strip().splitlines()[-3:])
            status = DENIED if "ermission" in (result.output_tail or "") else FAILED
            return [unavailable(RECORD_KIND, reason, status)]
        profile = json.loads(path.read_text())
        root = flamegraph.tree_from_speedscope(profile)
        svg_path = self.context.run_dir / FLAMEGRAPH_FILE
        svg_path.write_text(flamegraph.render_svg(root, f"py-spy record, {RATE_HZ} Hz, idle threads included"))
        return [
            EvidenceDraft(
                kind=RECORD_KIND,
                content=PySpyRecordContent.model_validate(
                    {
                        "rate_hz": RATE_HZ,
                        # What the flags mean for reading the graph: idle (waiting) samples are
                        # in, and samples are not restricted to the GIL holder (--gil is off).
                        "idle_included": True,
                        "gil_only": False,
                        "samples": root.samples,
                        "threads": summarize_threads(profile),
                        "functions": summarize_functions(profile),
                        "event_loop": ran_event_loop(profile),
                        "timed_out": result.timed_out,
                        "stopped_before_timeout": self.stopped_before_timeout,
                    }
                ),
                files=[
                    ArtifactFile(FLAMEGRAPH_FILE, svg_path, "image/svg+xml"),
                    ArtifactFile(PROFILE_FILE, path, "application/json"),
                ],
            )
        ]


def ran_event_loop(profile: dict) -> bool:
    """Whether any sample was taken inside an asyncio event loop's iteration: a loop thread
    waiting in its selector and one running a callback both have ``_run_once`` of
    asyncio's base_events.py on their stack."""
    loop_frames = {
        index
        for index, frame in enumerate(profile["shared"]["frames"])
        if frame.get("name", "").rsplit(".", 1)[-1] == "_run_once"
        and frame.get("file", "").replace("\\", "/").endswith("asyncio/base_events.py")
    }
    return any(loop_frames.intersection(stack) for thread in profile["profiles"] for stack in thread["samples"])


def summarize_threads(profile: dict) -> list[dict]:
    """Per thread: its samples and the frames it was most often in (self samples)."""
    frames = [flamegraph.frame_label(f) for f in profile["shared"]["frames"]]
    threads = []
    for thread in profile["profiles"]:
        leaves = Counter(frames[stack[-1]] for stack in thread["samples"] if stack)
        total = len(thread["samples"])
        threads.append(
            {
                "name": thread["name"],
                "samples": total,
                "top_frames": [
                    {"frame": frame, "samples": count, "pct": round(100.0 * count / total, 1)}
                    for frame, count in leaves.most_common(TOP_FRAMES)
                ],
            }
        )
    threads.sort(key=lambda t: -t["samples"])
    return threads


# Python functions in which a thread that py-spy samples is blocked, not running: the
# leaf frame of a thread waiting in C (a lock, a selector, accept) is its Python caller.
WAITING_LEAVES = frozenset(
    {
        ("threading.py", "Condition.wait"),
        ("threading.py", "Event.wait"),
        ("threading.py", "Thread._wait_for_tstate_lock"),
        ("threading.py", "Semaphore.acquire"),
        ("selectors.py", "EpollSelector.select"),
        ("selectors.py", "_PollLikeSelector.select"),
        ("selectors.py", "SelectSelector.select"),
        ("selectors.py", "KqueueSelector.select"),
        ("socket.py", "socket.accept"),
        ("subprocess.py", "Popen._try_wait"),
        ("queue.py", "Queue.get"),
        ("connection.py", "_recv_bytes"),
    }
)


def is_waiting(function: str, file: str) -> bool:
    return (file.rsplit("/", 1)[-1], function) in WAITING_LEAVES


def is_import_machinery(file: str) -> bool:
    """CPython's import system (frozen, so py-spy names it "<frozen importlib._bootstrap>"):
    a sample with it on the stack was taken while a module was found, compiled or run."""
    return file.startswith("<frozen importlib._bootstrap")


def summarize_functions(
    profile: dict, threads: int = 3, top: int = TOP_FUNCTIONS, on_stack: int = ON_STACK_FUNCTIONS
) -> list[dict]:
    """For the busiest threads: the functions holding their samples, with own share
    (the function itself was running or waiting there) and cumulative share (it was on
    the stack), and the line that held most of its own samples.

    Functions, not frames: py-spy records one frame per line, and a hot function spread
    over ten lines would otherwise rank below a single cold line.
    """
    frames = profile["shared"]["frames"]
    keys = [(f.get("name", "?"), f.get("file", "?")) for f in frames]
    tables = []
    for thread in sorted(profile["profiles"], key=lambda t: -len(t["samples"]))[:threads]:
        total = len(thread["samples"])
        if not total:
            continue
        own: Counter = Counter()
        cumulative: Counter = Counter()
        importing: Counter = Counter()
        blocked: Counter = Counter()
        lines: dict[tuple[str, str], Counter] = {}
        # Who calls each function (the frame above its innermost occurrence): where a
        # library's primitive (a sleep, a lock) sits in a loop, the loop is the caller's.
        callers: dict[tuple[str, str], Counter] = {}
        for full_stack in thread["samples"]:
            # --threads and --subprocesses add "process N" and "thread (N)" frames with no
            # file at the root of every stack: they are labels, not code.
            stack = [index for index in full_stack if frames[index].get("file")]
            if not stack:
                continue
            leaf = keys[stack[-1]]
            own[leaf] += 1
            lines.setdefault(leaf, Counter())[frames[stack[-1]].get("line")] += 1
            during_import = any(is_import_machinery(keys[index][1]) for index in stack)
            in_a_wait = is_waiting(*leaf)
            for key in {keys[index] for index in stack}:
                cumulative[key] += 1
                importing[key] += during_import
                blocked[key] += in_a_wait
            for index in stack:
                lines.setdefault(keys[index], Counter())
            innermost = {keys[index]: position for position, index in enumerate(stack)}
            for key, position in innermost.items():
                if position:
                    callers.setdefault(key, Counter())[stack[position - 1]] += 1
        ranked = sorted(cumulative, key=lambda key: (-own[key], -cumulative[key]))[:top]
        by_cumulative = sorted(cumulative, key=lambda key: -cumulative[key])
        chosen = list(dict.fromkeys(ranked + [key for key in by_cumulative if key not in ranked][:on_stack]))
        tables.append(
            {
                "thread": thread["name"],
                "samples": total,
                # Samples whose innermost frame is a known blocking wait (see WAITING_LEAVES).
                "waiting_pct": round(100.0 * sum(n for key, n in own.items() if is_waiting(*key)) / total, 1),
                "functions": [
                    {
                        "function": name,
                        "file": file,
                        "line": _hottest_line(lines.get((name, file)), frames, keys, (name, file)),
                        "own_samples": own[(name, file)],
                        "cumulative_samples": cumulative[(name, file)],
                        "own_pct": round(100.0 * own[(name, file)] / total, 1),
                        "cumulative_pct": round(100.0 * cumulative[(name, file)] / total, 1),
                        "importing_samples": importing[(name, file)],
                        "waiting_samples": blocked[(name, file)],
                        "waiting": is_waiting(name, file),
                        "caller": _caller(callers.get((name, file)), frames),
                    }
                    for name, file in chosen
                ],
            }
        )
    return tables


def _caller(counted: Counter | None, frames: list[dict]) -> dict | None:
    if not counted:
        return None
    frame = frames[counted.most_common(1)[0][0]]
    return {"function": frame.get("name", "?"), "file": frame.get("file", "?"), "line": frame.get("line")}


def _hottest_line(counted: Counter | None, frames: list[dict], keys: list, key: tuple[str, str]) -> int | None:
    if counted:
        return counted.most_common(1)[0][0]
    # No own samples: the first line recorded for it (where it called the hot callee).
    return next((frame.get("line") for frame, k in zip(frames, keys, strict=True) if k == key), None)


def thread_state(thread: dict) -> str:
    """py-spy's own wording: idle, active, active+gil (idle+gil: waiting while holding it)."""
    state = "active" if thread.get("active") else "idle"
    return state + ("+gil" if thread.get("owns_gil") else "")


def dump(executor: Executor, handle: ProcessHandle, pid: int, timeout_s: float = 10.0) -> EvidenceDraft:
    """`py-spy dump` of a live process: every Python thread, its state and its stack."""
    pyspy = executor.tool_path("py-spy")
    if pyspy is None:
        return missing_tool(DUMP_KIND, "py-spy", executor)
    result = handle.run_tool([pyspy, "dump", "--json", "--pid", str(pid)], timeout_s=timeout_s)
    if result.returncode != 0:
        return tool_failure(DUMP_KIND, "py-spy dump", result)
    try:
        threads = parse_dump(result.stdout)
    except ValueError:
        return unavailable(DUMP_KIND, f"py-spy dump printed no JSON: {result.stdout[:200]!r}", FAILED)
    return EvidenceDraft(
        kind=DUMP_KIND,
        content=PySpyDumpContent.model_validate(
            {"pid": pid, "threads": threads, "duration_s": round(result.duration_s, 4)}
        ),
        text=render_dump(threads),
    )


def parse_dump(text: str) -> list[dict]:
    """`py-spy dump --json` output: every thread with its state and stack, innermost
    frame first. ValueError when it is not py-spy's JSON."""
    raw_threads = json.loads(text)
    if not isinstance(raw_threads, list):
        raise ValueError("py-spy dump JSON is a list of threads")
    return [
        {
            "id": thread.get("os_thread_id") or thread.get("thread_id"),
            "name": thread.get("thread_name"),
            "state": thread_state(thread),
            "active": bool(thread.get("active")),
            "owns_gil": bool(thread.get("owns_gil")),
            "frames": [
                {"function": f["name"], "file": f["filename"], "line": f.get("line")} for f in thread.get("frames", [])
            ],
        }
        for thread in raw_threads
    ]


def render_dump(threads: list[dict]) -> str:
    """The dump as py-spy prints it, innermost frame first."""
    lines = []
    for thread in threads:
        lines.append(f'Thread {thread["id"]} ({thread["state"]}): "{thread["name"] or ""}"')
        for frame in thread["frames"]:
            lines.append(f"    {frame['function']} ({frame['file']}:{frame['line']})")
    return "\n".join(lines) + "\n"
