"""The stall snapshot's parsers on tool output recorded from a frozen hand-off program
(examples/handoff.py with two clients): gdb's py-bt, py-spy's dump JSON, /proc io and
the threads' kernel state. No process, tool or service runs here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.measure.probes import procio, pyspy
from services.measure.probes.core import FUTEX, parse_gdb, split_sections, thread_states

DATA = Path(__file__).parent / "data"


def test_gdb_py_bt_gives_each_thread_its_frames_and_the_gil_waiters():
    text = (DATA / "gdb-handoff-py-bt.txt").read_text()
    threads, py_bt = parse_gdb(text)
    assert py_bt
    assert [t["lwp"] for t in threads] == [11514, 11515, 11516, 11517, 11518, 11519]
    assert [t["current"] for t in threads] == [True, False, False, False, False, False]
    waiting = [t["lwp"] for t in threads if t["waiting_for_gil"]]
    assert waiting == [11516, 11519]  # the two threads whose py-bt says "Waiting for the GIL"
    echo = next(t for t in threads if t["lwp"] == 11519)
    assert [f["function"] for f in echo["frames"][:3]] == ["wait", "get", "echo"]
    assert echo["frames"][2] == {"function": "echo", "file": "/work/wt-evidence/examples/handoff.py", "line": 28}
    crunch = next(t for t in threads if t["lwp"] == 11515)
    assert crunch["frames"][0]["function"] == "crunch" and not crunch["waiting_for_gil"]
    # Native frames come from `thread apply all bt`, innermost first.
    assert "take_gil" in next(t for t in threads if t["lwp"] == 11519)["native_frames"]


def test_gdb_without_py_bt_says_so_and_keeps_native_frames():
    text = (DATA / "gdb-handoff-py-bt.txt").read_text()
    sections = split_sections(text)
    without = text.replace(sections["py-bt"], '\nUndefined command: "py-bt".  Try "help".')
    threads, py_bt = parse_gdb(without)
    assert not py_bt
    assert all(t["frames"] == [] for t in threads)
    # take_gil in the native stack still marks the waiters.
    assert [t["lwp"] for t in threads if t["waiting_for_gil"]] == [11516, 11519]


def test_pyspy_dump_json_gives_threads_and_the_gil_holder():
    threads = pyspy.parse_dump((DATA / "pyspy-dump-handoff.json").read_text())
    assert sorted(t["name"] for t in threads) == ["MainThread", "client-0", "client-1", "crunch", "echo", "echo"]
    assert [t["name"] for t in threads if t["owns_gil"]] == ["crunch"]
    crunch = next(t for t in threads if t["name"] == "crunch")
    assert crunch["id"] == 11515 and crunch["frames"][0]["function"] == "crunch"
    assert crunch["frames"][0]["file"].endswith("examples/handoff.py")
    # Frozen (SIGSTOP), py-spy sees no thread as active: the kernel state says more.
    assert not any(t["active"] for t in threads)
    assert "crunch (/work/wt-evidence/examples/handoff.py:" in pyspy.render_dump(threads)


def test_pyspy_dump_that_is_not_json_is_refused():
    with pytest.raises(ValueError):
        pyspy.parse_dump("Error: Failed to suspend process")
    with pytest.raises(ValueError):
        pyspy.parse_dump('{"error": 1}')


def test_threads_kernel_state_tells_the_running_thread_from_the_waiting_ones():
    states = thread_states(json.loads((DATA / "threads-handoff.json").read_text()))
    assert states[11515] == "running"  # crunch, computing with the GIL
    assert {states[tid] for tid in (11514, 11516, 11517, 11518, 11519)} == {"waiting"}
    assert thread_states([{"tid": 1, "syscall": 0}, {"tid": 2, "syscall": None}]) == {1: "syscall 0"}
    assert FUTEX in (202, 98)


def test_proc_io_counters_and_bytes_per_syscall():
    counters = procio.parse((DATA / "proc-io-handoff.txt").read_text())
    assert set(counters) == set(procio.FIELDS)
    assert counters["syscr"] > 0 and counters["rchar"] > 0
    derived = procio.derived(counters)
    assert derived["bytes_per_read_syscall"] == round(counters["rchar"] / counters["syscr"], 2)
    assert procio.derived({"rchar": 10, "syscr": 0})["bytes_per_read_syscall"] is None
    assert procio.parse("rchar: 5\nnonsense\nsyscr:2\n") == {"rchar": 5, "syscr": 2}
