"""Parsers of tool output, on output recorded from the real tools (tests/unit/data/).

The functional tier runs the tools themselves; these pin what each parser makes of
their text, in milliseconds.
"""

from __future__ import annotations

from pathlib import Path

from services.evidence import FaulthandlerContent, ImportsContent, StraceContent
from services.measure import pytest_command
from services.measure.probes import faulthandler, imports, procio
from services.measure.probes.strace import parse_summary

DATA = Path(__file__).resolve().parents[2] / "data"


def test_strace_summary_of_a_thread_hand_off_is_futex_bound():
    # Recorded with `strace -f -c` of two threads passing 3000 items through queues.
    rows, total = parse_summary((DATA / "strace-handoff.txt").read_text())
    assert rows[0]["name"] == "futex" and rows[0]["pct_time"] > 90
    assert rows[0]["calls"] > 6000 and rows[0]["errors"] > 0
    assert total is not None and total["name"] == "total"
    assert all(row["name"] != "total" for row in rows)
    assert abs(sum(row["pct_time"] for row in rows) - 100) < 1.0
    # What the probe stores is the typed model: a row it cannot hold fails here, not in a rule.
    content = StraceContent.model_validate({"syscalls": rows, "total": total, "top": rows[0]["name"]})
    assert content.syscalls is not None and content.syscalls[0].usecs_per_call == rows[0]["usecs_per_call"]


def test_strace_summary_with_blank_errors_and_no_rows():
    text = (
        "% time     seconds  usecs/call     calls    errors syscall\n"
        "------ ----------- ----------- --------- --------- ----------------\n"
        " 55.00    0.011000          11      1000           read\n"
        " 45.00    0.009000           9      1000       500 recvfrom\n"
        "------ ----------- ----------- --------- --------- ----------------\n"
        "100.00    0.020000          10      2000       500 total\n"
    )
    rows, total = parse_summary(text)
    assert [(r["name"], r["errors"]) for r in rows] == [("read", 0), ("recvfrom", 500)]
    assert total is not None and total["calls"] == 2000
    assert parse_summary("strace: ptrace(PTRACE_TRACEME, ...): Operation not permitted\n") == ([], None)


def test_importtime_keeps_the_programs_own_imports_slowest_first():
    total, slowest = imports.parse((DATA / "importtime.txt").read_text())
    modules = [entry["module"] for entry in slowest]
    assert "json" in modules and "email.parser" in modules
    assert "_io" not in modules  # the interpreter's own start-up imports are indented deeper
    assert [e["cumulative_s"] for e in slowest] == sorted((e["cumulative_s"] for e in slowest), reverse=True)
    assert total >= slowest[0]["cumulative_s"] > 0
    ImportsContent.model_validate({"total_import_s": total, "slowest": slowest})


def test_junit_xunit1_gives_pytest_node_ids_and_durations():
    cases = pytest_command.parse(DATA / "junit-xunit1.xml")
    assert [c.test_id for c in cases] == [
        "test_latency.py::test_handoff_round_trips",
        "test_latency.py::test_waits_for_a_timer",
        "test_latency.py::test_small_computation",
    ]
    assert all(c.outcome == "passed" for c in cases)
    # JUnit carries milliseconds: a 1 ms test is at the clock's resolution.
    assert cases[2].duration_s == 0.001


def test_junit_missing_or_empty_file_is_no_cases(tmp_path):
    assert pytest_command.parse(tmp_path / "absent.xml") == []
    (tmp_path / "empty.xml").write_text("")
    assert pytest_command.parse(tmp_path / "empty.xml") == []


def test_faulthandler_tracebacks_of_two_threads():
    threads = faulthandler.parse((DATA / "faulthandler-two-threads.txt").read_text())
    assert len(threads) == 2
    assert threads[0]["frames"][0]["function"] == "sleeper"
    assert threads[0]["frames"][-1]["function"] == "_bootstrap"
    assert threads[1]["frames"][0]["function"] == "<module>"
    FaulthandlerContent.model_validate({"threads": threads, "trigger": "stall"})


def test_proc_io_counters_and_bytes_per_read():
    counters = procio.parse((DATA / "proc-io.txt").read_text())
    assert set(counters) >= {"rchar", "syscr", "wchar", "syscw"}
    derived = procio.derived({"rchar": 300_000, "syscr": 300_000, "wchar": 0, "syscw": 0})
    assert derived == {"bytes_per_read_syscall": 1.0, "bytes_per_write_syscall": None}
