"""The text report's evidence lines, from stored evidence entries (typed on the way in)."""

from __future__ import annotations

from pathlib import Path

from services.jobs.report import render_evidence
from services.measure.probes.strace import parse_summary

DATA = Path(__file__).resolve().parents[2] / "data"


def _entry(kind: str, content: dict, test: str | None = None) -> dict:
    return {"kind": kind, "config": "cpuset=0-1", "test": test, "content": content, "artifacts": []}


def test_strace_entry_names_the_top_syscall_and_its_rows():
    rows, total = parse_summary((DATA / "strace-handoff.txt").read_text())
    lines = render_evidence(_entry("strace", {"syscalls": rows, "total": total, "top": "futex", "top_pct_time": 98.1}))
    assert lines[0] == "  strace (cpuset=0-1): futex holds 98.1 % of syscall time"
    assert "futex" in lines[1] and "calls" in lines[1]
    assert len(lines) == 1 + min(5, len(rows))


def test_gdb_entry_flags_threads_waiting_for_the_gil():
    frame = {"function": "crunch", "file": "/work/handoff.py", "line": 12}
    content = {
        "reader": "gdb",
        "waiting_for_gil": 1,
        "threads": [
            {"id": 1, "lwp": 100, "frames": [frame], "waiting_for_gil": False},
            {"id": 2, "lwp": 101, "frames": [], "waiting_for_gil": True},
        ],
    }
    lines = render_evidence(_entry("gdb", content, test="t.py::test_x"))
    assert lines[0] == "  gdb (cpuset=0-1 [t.py::test_x]): 2 threads, 1 waiting for the GIL (read by gdb)"
    assert lines[1] == "      thread 1 (LWP 100): crunch (handoff.py:12)"
    assert lines[2] == "      thread 2 (LWP 101) [Waiting for the GIL]: (no Python frames)"


def test_an_entry_that_could_not_look_says_why():
    lines = render_evidence(_entry("stall", {"status": "no_stall", "reason": "the run ended first"}))
    assert lines == ["  stall (cpuset=0-1): no_stall: the run ended first"]
