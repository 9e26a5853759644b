"""The census's trace, split at the test boundaries its plugin marks."""

from __future__ import annotations

import os
import subprocess
import sys

from services.evidence import CensusContent, CensusTest
from services.measure.executors.local import LocalExecutor
from services.measure.probes import census
from services.measure.probes.base import ProbeContext
from services.settings import Settings
from services.thresholds import Thresholds
from tests.support.hidden_waits import BLOCKS_LOOP, HEADER

TRACE = """\
100 read(3</usr/lib/python3.11/os.py>, ""..., 4096) = 4096
100 lseek(7</dev/null>, 1, SEEK_SET) = 1
100 clock_nanosleep(CLOCK_REALTIME, 0, {tv_sec=0, tv_nsec=500000}, NULL) = 0
100 clock_nanosleep(CLOCK_REALTIME, 0, {tv_sec=0, tv_nsec=500000}, NULL) = 0
100 lseek(7</dev/null>, 2, SEEK_SET) = 2
100 read(3</tmp/x>, ""..., 4096) = 12
100 lseek(7</dev/null>, 3, SEEK_SET) = 3
101 recvfrom(5<UNIX:[1234]>, ""..., 1, 0, NULL, NULL) = 1
101 recvfrom(5<UNIX:[1234]>, ""..., 1, 0, NULL, NULL <unfinished ...>
100 nanosleep({tv_sec=0, tv_nsec=1000}, NULL) = 0
101 <... recvfrom resumed>) = 1
101 recvfrom(5<UNIX:[1234]>, ""..., 1, 0, NULL, NULL) = 0
100 lseek(7</dev/null>, 4, SEEK_SET) = 4
"""


def test_calls_between_a_test_s_marks_are_its_own_whichever_process_made_them():
    tests = census.parse(TRACE.splitlines(), {0: "t.py::test_sleeps", 1: "t.py::test_reads"})
    assert tests["t.py::test_sleeps"] == {"sleeps": 2, "reads": {}}
    # Two reads with data (one resumed), the EOF read not counted; a sleep of the other pid.
    assert tests["t.py::test_reads"] == {"sleeps": 1, "reads": {"socket": {"reads": 2, "median_bytes": 1}}}
    # Start-up's read of os.py and the read between the tests belong to no test.
    assert set(tests) == {"t.py::test_sleeps", "t.py::test_reads"}


def test_suspects_are_tests_that_poll_at_busy_polling_s_rate_or_read_in_tiny_pieces():
    content = CensusContent.model_validate(
        {
            "tests": {
                "t::polls": {"sleeps": 600, "reads": {}},
                "t::sleeps_once_in_a_while": {"sleeps": 30, "reads": {}},
                "t::reads_bytes": {"sleeps": 0, "reads": {"socket": {"reads": 30000, "median_bytes": 1}}},
                "t::reads_blocks": {"sleeps": 0, "reads": {"file": {"reads": 30000, "median_bytes": 4096}}},
            }
        }
    )
    durations = {"t::polls": 0.3, "t::sleeps_once_in_a_while": 10.0, "t::reads_bytes": 0.03, "t::reads_blocks": 0.2}
    assert census.suspects(content, durations, Thresholds()) == ["t::polls", "t::reads_bytes"]


XDIST_TRACE = """\
200 lseek(7</dev/null>, 1, SEEK_SET) = 1
300 lseek(7</dev/null>, 3, SEEK_SET) = 3
200 nanosleep({tv_sec=0, tv_nsec=1000}, NULL) = 0
300 recvfrom(5<UNIX:[1]>, ""..., 1, 0, NULL, NULL) = 1
400 nanosleep({tv_sec=0, tv_nsec=1000}, NULL) = 0
200 lseek(7</dev/null>, 2, SEEK_SET) = 2
200 nanosleep({tv_sec=0, tv_nsec=1000}, NULL) = 0
"""


def test_two_workers_running_tests_at_once_keep_their_calls_apart():
    # pytest-xdist: each worker marks its own test; pid 400 (a subprocess) marks none and
    # its call goes to the test that started last; after its end a worker's calls are no test's.
    tests = census.parse(XDIST_TRACE.splitlines(), {0: "a", 1: "b"})
    assert tests["a"] == {"sleeps": 1, "reads": {}}
    assert tests["b"] == {"sleeps": 1, "reads": {"socket": {"reads": 1, "median_bytes": 1}}}


def test_the_run_s_cost_of_a_traced_call_is_what_its_plugin_timed_the_largest_of_its_processes(tmp_path):
    ids = tmp_path / census.IDS_FILE
    ids.write_text("traced_call_s\t0.00019\n0\tt.py::test_a\ntraced_call_s\t0.00021\ntraced_call_s\tjunk\n")
    assert census.traced_call_s(ids) == 0.00021
    assert census.read_names(ids) == {0: "t.py::test_a"}
    assert census.traced_call_s(tmp_path / "missing.txt") is None


def test_each_test_s_counters_are_summed_over_its_runs_and_a_line_not_the_plugin_s_is_skipped(tmp_path):
    ids = tmp_path / census.IDS_FILE
    ids.write_text(
        "0\tt.py::test_a\n"
        'counters\tt.py::test_a\t{"wall_s": 0.3, "cpu_s": 0.01, "voluntary_switches": 4, "involuntary_switches": 1,'
        ' "loop_blocked_s": 0.2, "loop_held": 1, "loop_longest_s": 0.2}\n'
        'counters\tt.py::test_a\t{"wall_s": 0.1, "cpu_s": 0.02, "loop_blocked_s": 0.05, "loop_held": 2,'
        ' "loop_longest_s": 0.03}\n'
        'counters\tt.py::test_b\t{"wall_s": NaN, "cpu_s": -1, "voluntary_switches": "many", "involuntary_switches": true}\n'
        "counters\tt.py::test_c\tnot json\n"
        'counters\tt.py::test_d\t["wall_s", 1]\n'
    )
    counted = census.read_counters(ids)
    assert counted["t.py::test_a"] == {
        "wall_s": 0.4,
        "cpu_s": 0.03,
        "voluntary_switches": 4,
        "involuntary_switches": 1,
        "loop_blocked_s": 0.25,
        "loop_held": 3,
        "loop_longest_s": 0.2,
    }
    # A job writes this file too: a number that is not one (NaN, negative, a string, a bool) is no count.
    assert counted["t.py::test_b"] == {}
    assert set(counted) == {"t.py::test_a", "t.py::test_b"}
    assert census.read_names(ids) == {0: "t.py::test_a"}


def _loop_census(blocked_s: float | None, wall_s: float) -> CensusTest:
    return CensusTest(wall_s=wall_s, cpu_s=0.01, loop_blocked_s=blocked_s, loop_held=1 if blocked_s else None)


def test_a_test_whose_loop_was_blocked_for_the_rule_s_share_and_seconds_is_a_suspect_whatever_its_timing():
    limits = Thresholds()
    content = CensusContent(
        tests={
            # 120 callbacks of 15 ms: 1.8 s of a 2.0 s test, none past a per-callback line.
            "t::short_blocks": _loop_census(1.8, 2.0),
            # One 0.2 s block in a 0.25 s test, no CPU to speak of.
            "t::one_block": _loop_census(0.2, 0.25),
            # One 25 ms callback in a 2 s run: under the rule's least seconds.
            "t::one_short": _loop_census(0.025, 2.0),
            # 0.3 s blocked over a 10 s test: 3 %, under the rule's share.
            "t::long_test": _loop_census(0.3, 10.0),
            "t::no_loop": _loop_census(None, 0.5),
        }
    )
    # The share is of the test's untraced duration where the survey has it, else of the
    # plugin's own wall.
    durations = {"t::short_blocks": 2.0, "t::one_short": 2.0, "t::long_test": 10.0}
    assert census.suspects(content, durations, limits) == ["t::short_blocks", "t::one_block"]


# The suite's hidden waits: a coroutine blocking its loop and its twin that awaits, beside
# a test that computes.
PLUGGED_SUITE = (
    HEADER
    + BLOCKS_LOOP
    + """

def test_works():
    n = 0
    for i in range(300_000):
        n += i % 7
"""
)


def test_the_plugin_counts_each_test_s_work_switches_and_blocked_loop_in_a_real_pytest_run(tmp_path):
    """The census's plugin in a pytest run of its own (no strace: what it counts is the
    process's, not the tracer's): the blocked test's 0.2 s, and at most a preempted sliver
    for the test that awaits."""
    (tmp_path / "test_plugged.py").write_text(PLUGGED_SUITE)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    context = ProbeContext(LocalExecutor(Settings()), run_dir, stall_after_s=60.0, timeout_s=60.0)
    probe = census.CensusProbe(context)
    env = {**os.environ, **probe.env()}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", census.PLUGIN, "test_plugged.py"]
    finished = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    counted = census.read_counters(run_dir / census.IDS_FILE)
    assert set(counted) == {
        f"test_plugged.py::{name}" for name in ("test_blocks_its_loop", "test_awaits_its_wait", "test_works")
    }
    blocked, awaits, works = (
        counted[f"test_plugged.py::{name}"] for name in ("test_blocks_its_loop", "test_awaits_its_wait", "test_works")
    )
    assert 0.19 <= blocked["loop_blocked_s"] <= blocked["wall_s"] and blocked["loop_held"] >= 1, blocked
    assert blocked["loop_longest_s"] >= 0.19 and blocked["cpu_s"] < 0.1, blocked
    # The awaiting test's callbacks take microseconds; on a busy machine one preempted in
    # the middle can outlast the 5 ms floor (CI's parallel tier: 21 involuntary switches in
    # it), and the census counts what the wall clock saw. Its seconds stay far from the
    # blocked test's, under the 0.1 s event_loop_blocked needs to suspect a test.
    assert awaits.get("loop_blocked_s", 0.0) < 0.05 and awaits["wall_s"] >= 0.1, awaits
    assert works["cpu_s"] > 0.01 and works["voluntary_switches"] >= 0 and works["involuntary_switches"] >= 0, works
    assert census.suspects(
        CensusContent(tests={test_id: CensusTest.model_validate(row) for test_id, row in counted.items()}),
        {},
        Thresholds(),
    ) == ["test_plugged.py::test_blocks_its_loop"]
