"""census: a suite's sleeps and reads, attributed to its tests (docs/explanations/cost-model.md).

A suite of real size is never traced whole with every probe (docs/explanations/cost-model.md: each costs the
suite's time again), yet a test that polls with 0.5 ms sleeps, or reads a socket a byte at
a time, leaves no mark on the timing screen: it is neither slow nor CPU-sensitive. The
census is the survey's own run of the suite in one configuration (survey_census.SurveyCensus: a
run of its own cost the suite's time again), under strace, tracing only sleeps and reads
(``--seccomp-bpf`` leaves every other syscall untraced and free), with the test boundaries
marked in the same trace: a small pytest plugin seeks a descriptor it opened on /dev/null to
``2 i + 1`` when test ``i`` starts and ``2 i + 2`` when it ends, an ``lseek`` line whose
numbers survive ``-s 0``. Every traced call between a start and its end belongs to that
test, whichever process made it. The tests whose share looks like polling or tiny reads
(``suspects``) are then drilled alone, with every probe, and the rules name them.

Some mechanisms leave no mark on a trace of sleeps and reads either: an asyncio test
whose coroutine blocks its loop 0.2 s in a synchronous call makes one system call, or
none, and takes as long on one core as on two. The same plugin counts, per test and in
the process that runs it (pytest_runtest_protocol: an xdist controller runs none), what
costs nothing to count: its wall and CPU time, its context switches (getrusage), and the
time asyncio callbacks held an event loop, every callback from
Thresholds.event_loop_blocked_floor_s on, as the asyncio_loop probe counts them (a wrap
of ``asyncio.events.Handle._run``: two clock reads a callback). A test whose loop was
blocked for event_loop_blocked's share of its time is a suspect too.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections import Counter
from pathlib import Path

from services.evidence import CensusContent, CensusTest, EvidenceKind
from services.measure.executors.base import RunResult
from services.measure.probes.base import DENIED, FAILED, EvidenceDraft, unavailable
from services.measure.probes.hooks import install_hook
from services.measure.probes.reads import READ_SYSCALLS, ReadSizesProbe, fd_type
from services.thresholds import Thresholds

KIND = EvidenceKind.census
TRACE_FILE = "census-trace.txt"
IDS_FILE = "census-tests.txt"
HOOK_DIR = "census-hook"
PLUGIN = "lagtrace_census"
SLEEPS = ("clock_nanosleep", "nanosleep")
TRACED = ("lseek", *SLEEPS, *READ_SYSCALLS)

PLUGIN_SOURCE = '''"""lagtrace's census: each test's start and end marked in the strace of the run,
and what each test cost in its own process (wall, CPU, context switches, a blocked loop)."""

import json
import os
import resource
import time

import pytest

_ids = {}
_fd = None
_names = None
_floor = float(os.environ["LAGTRACE_CENSUS_LOOP_FLOOR_S"])
_loop = {"patched": False, "blocked_s": 0.0, "held": 0, "longest_s": 0.0}


def _patch_loop():
    """Time every asyncio callback. asyncio is imported here, once: a test that imports it
    in its own body would find no wrap in place (about 15 ms of start-up, in a traced run)."""
    if _loop["patched"]:
        return
    _loop["patched"] = True
    import asyncio.events as events

    original = events.Handle._run

    def _run(self):
        start = time.perf_counter()
        try:
            return original(self)
        finally:
            took = time.perf_counter() - start
            if took >= _floor:
                _loop["blocked_s"] += took
                _loop["held"] += 1
                _loop["longest_s"] = max(_loop["longest_s"], took)

    events.Handle._run = _run


def _now():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return (
        time.perf_counter(),
        time.process_time(),
        usage.ru_nvcsw,
        usage.ru_nivcsw,
        _loop["blocked_s"],
        _loop["held"],
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _loop["longest_s"] = 0.0
    before = _now()
    yield
    after = _now()
    wall, cpu, voluntary, involuntary, blocked, held = (b - a for a, b in zip(before, after))
    row = {"wall_s": wall, "cpu_s": cpu, "voluntary_switches": voluntary, "involuntary_switches": involuntary}
    if held:
        row.update(loop_blocked_s=blocked, loop_held=held, loop_longest_s=_loop["longest_s"])
    _names.write("counters\\t%s\\t%s\\n" % (item.nodeid, json.dumps(row)))
    _names.flush()


def pytest_configure(config):
    global _fd, _names
    _fd = os.open(os.devnull, os.O_RDONLY)
    _names = open(os.environ["LAGTRACE_CENSUS_IDS"], "a", encoding="utf-8")
    _patch_loop()
    # What one traced call costs in this run: a test's traced duration, less its calls
    # times this, is what it would have taken untraced.
    start = time.perf_counter()
    for _ in range(200):
        os.lseek(_fd, 0, os.SEEK_SET)
    _names.write(f"traced_call_s\\t{(time.perf_counter() - start) / 200}\\n")
    _names.flush()


def pytest_runtest_logstart(nodeid, location):
    index = _ids.setdefault(nodeid, len(_ids))
    _names.write(f"{index}\\t{nodeid}\\n")
    _names.flush()
    os.lseek(_fd, 2 * index + 1, os.SEEK_SET)


def pytest_runtest_logfinish(nodeid, location):
    os.lseek(_fd, 2 * _ids[nodeid] + 2, os.SEEK_SET)
'''

SITECUSTOMIZE = "import os, sys\n"

# "1234  lseek(7</dev/null>, 5, SEEK_SET) = 5"
_LSEEK = re.compile(r"lseek\(\d+</dev/null>, (?P<offset>\d+), SEEK_SET\)")
_CALL = re.compile(r"^(?:\[pid\s+)?(?P<pid>\d+)?\]?\s*(?P<name>\w+)\((?P<fd>\d+)?(?:<(?P<desc>[^>]*)>)?")
_RESUMED = re.compile(r"^(?:\[pid\s+)?(?P<pid>\d+)?\]?\s*<\.\.\. (?P<name>\w+) resumed>")
_UNFINISHED = re.compile(r"<unfinished \.\.\.>\s*$")
_RESULT = re.compile(r"\)\s+=\s+(?P<ret>-?\d+)")


def parse(lines, names: dict[int, str]) -> dict[str, dict]:
    """Per test: its sleeps, and its reads with data per descriptor type (count, median size).

    A call belongs to the test its own process is running (pytest-xdist runs one in each
    worker at once); a process that marks no test (a subprocess a test started) gives its
    calls to the test that started last."""
    running: dict[str | None, int | None] = {}
    last: int | None = None
    sleeps: Counter = Counter()
    sizes: dict[int, dict[str, Counter]] = {}
    pending: dict[str | None, tuple[str, str]] = {}
    for line in lines:
        seek = _LSEEK.search(line)
        if seek:
            offset = int(seek["offset"])
            marker = _CALL.match(line)
            pid = marker["pid"] if marker else None
            running[pid] = (offset - 1) // 2 if offset % 2 else None
            last = running[pid] if offset % 2 else (None if last == (offset - 2) // 2 else last)
            continue
        resumed = _RESUMED.match(line)
        if resumed:
            pid = resumed["pid"]
            name, kind = pending.pop(pid, (resumed["name"], "unknown"))
        else:
            call = _CALL.match(line)
            if not call or call["name"] not in TRACED:
                continue
            pid, name, kind = call["pid"], call["name"], fd_type(call["desc"])
            if _UNFINISHED.search(line):
                pending[pid] = (name, kind)
                continue
        current = running.get(pid, last)
        if current is None:
            continue  # start-up, collection, a fixture's teardown between tests
        if name in SLEEPS:
            sleeps[current] += 1
            continue
        result = _RESULT.search(line)
        if result is not None and int(result["ret"]) > 0:
            sizes.setdefault(current, {}).setdefault(kind, Counter())[int(result["ret"])] += 1
    tests = {}
    for index in set(sleeps) | set(sizes):
        reads = sizes.get(index, {})
        by_type = {
            kind: {"reads": sum(c.values()), "median_bytes": statistics.median(c.elements())}
            for kind, c in reads.items()
        }
        tests[names.get(index, f"#{index}")] = {"sleeps": sleeps[index], "reads": by_type}
    return tests


def read_names(path: Path) -> dict[int, str]:
    names = {}
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            index, _, node = line.partition("\t")
            if index.isdigit() and node:
                names[int(index)] = node
    return names


def traced_call_s(path: Path) -> float | None:
    """What one traced call cost the run, as the plugin timed it (each pytest process
    times its own: the largest is kept)."""
    costs = []
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            key, _, value = line.partition("\t")
            if key == "traced_call_s":
                try:
                    costs.append(float(value))
                except ValueError:
                    continue
    return max(costs) if costs else None


COUNTED = ("wall_s", "cpu_s", "voluntary_switches", "involuntary_switches", "loop_blocked_s", "loop_held")


def read_counters(path: Path) -> dict[str, dict]:
    """Each test's counters as the plugin wrote them, by test id. A test run twice in one
    run (a rerun plugin) counts both; a line that is not the plugin's is skipped (the file
    is the job's to write too: nothing in it is trusted beyond its numbers' type)."""
    tests: dict[str, dict] = {}
    if not path.exists():
        return tests
    for line in path.read_text(errors="replace").splitlines():
        key, _, rest = line.partition("\t")
        test_id, _, row = rest.partition("\t")
        if key != "counters" or not test_id:
            continue
        try:
            values = json.loads(row)
        except ValueError:
            continue
        if not isinstance(values, dict):
            continue
        counted = tests.setdefault(test_id, {})
        for name in COUNTED:
            value = values.get(name)
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
                counted[name] = counted.get(name, 0) + value
        longest = values.get("loop_longest_s")
        if isinstance(longest, int | float) and math.isfinite(longest) and longest >= 0:
            counted["loop_longest_s"] = max(longest, counted.get("loop_longest_s", 0.0))
    return tests


def calls(test: CensusTest) -> int:
    """The traced calls of a test that cost it time: its sleeps and its reads."""
    return test.sleeps + sum(row.reads for row in test.reads.values())


def suspects(content: CensusContent, durations: dict[str, float], thresholds: Thresholds) -> list[str]:
    """The tests whose census looks like polling (sleeps at busy_polling's rate over the
    test's duration) or tiny reads (tiny_reads' count of reads at its median size)."""
    found = []
    for test_id, census in (content.tests or {}).items():
        duration = durations.get(test_id)
        polls = (
            duration is not None
            and duration > 0
            and census.sleeps >= thresholds.busy_polling_min_calls
            and census.sleeps / duration >= thresholds.busy_polling_min_calls_per_s
        )
        tiny = any(
            row.reads >= thresholds.tiny_reads_min_syscalls and row.median_bytes <= thresholds.tiny_reads_max_bytes
            for row in census.reads.values()
        )
        if polls or tiny or blocked_loop(census, duration, thresholds):
            found.append(test_id)
    return found


def blocked_loop(census: CensusTest, duration: float | None, thresholds: Thresholds) -> bool:
    """Whether the test's callbacks held its event loop for event_loop_blocked's share of
    its time and its least seconds: what the rule itself weighs, once the asyncio_loop
    probe names the call. No CPU effect, no timing mark: a coroutine that blocks its loop
    0.2 s in a synchronous call takes 0.2 s on one core as on two."""
    blocked = census.loop_blocked_s or 0.0
    span = duration if duration is not None and duration > 0 else census.wall_s
    return (
        blocked >= thresholds.event_loop_blocked_min_s
        and span is not None
        and span > 0
        and blocked / span >= thresholds.event_loop_blocked_share
    )


class CensusProbe(ReadSizesProbe):
    """Not a drill probe of its own: the engine runs it once over a whole suite. The reads
    probe's strace, tracing sleeps and the plugin's marks as well."""

    name = KIND.value
    kind = KIND
    traced = TRACED
    trace_file = TRACE_FILE

    def command(self, command: list[str]) -> list[str]:
        return [*super().command(command), "-p", PLUGIN]

    # The threshold's default: the survey sets its job's (survey_census.SurveyCensus).
    floor_s = Thresholds().event_loop_blocked_floor_s

    def env(self) -> dict[str, str]:
        hook = install_hook(
            self.context.run_dir / HOOK_DIR, self.visible(HOOK_DIR), SITECUSTOMIZE, **{PLUGIN: PLUGIN_SOURCE}
        )
        return {
            **hook,
            "LAGTRACE_CENSUS_IDS": self.visible(IDS_FILE),
            "LAGTRACE_CENSUS_LOOP_FLOOR_S": str(self.floor_s),
        }

    def collect(self, result: RunResult) -> list[EvidenceDraft]:
        path = self.context.run_dir / TRACE_FILE
        if not path.exists():
            reason = "strace wrote no census trace"
            if result.output_tail:
                reason += ": " + " / ".join(result.output_tail.strip().splitlines()[-3:])
            return [unavailable(KIND, reason, DENIED if "ptrace" in (result.output_tail or "") else FAILED)]
        names = read_names(self.context.run_dir / IDS_FILE)
        with path.open(errors="replace") as handle:
            tests = parse(handle, names)
        for test_id, counted in read_counters(self.context.run_dir / IDS_FILE).items():
            tests.setdefault(test_id, {"sleeps": 0, "reads": {}}).update(counted)
        content = CensusContent(
            tests={test_id: CensusTest.model_validate(row) for test_id, row in tests.items()},
            tests_seen=len(names),
            traced_call_s=traced_call_s(self.context.run_dir / IDS_FILE),
            loop_floor_s=self.floor_s,
            wall_s=result.wall_s,
            timed_out=result.timed_out,
            stopped_before_timeout=self.stopped_before_timeout,
        )
        return [EvidenceDraft(kind=KIND, content=content)]
