"""The text report's evidence lines, from stored evidence entries (typed on the way in)."""

from __future__ import annotations

from pathlib import Path

from services.jobs.report_schema import ReportEvidence, parse_report
from services.jobs.report_text import render_evidence
from services.measure.probes.strace import parse_summary

DATA = Path(__file__).resolve().parents[2] / "data"


def _entry(kind: str, content: dict, test: str | None = None) -> ReportEvidence:
    return ReportEvidence(
        id=1, kind=kind, config="cpuset=0-1", test=test, run=None, content=content, text=None, artifacts=[]
    )


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


def test_stall_entry_shows_every_part_of_the_snapshot():
    content = {
        "stall_after_s": 1.0,
        "clock": "test",
        "wall_s": 4.2,
        "elapsed_s": 3.05,
        "test": "t.py::test_slow",
        "test_elapsed_s": 1.0,
        "timed_out": False,
        "freeze_delay_s": 0.0004,
        "frozen_s": 0.31,
        "attempts": 2,
        "processes": [
            {"pid": 10, "program": "dash", "python": False, "snapshotted": False},
            {"pid": 11, "program": "python3.11", "python": True, "snapshotted": True},
        ],
        "captured": ["py-spy dump of 1 of 1 Python process(es) (every thread, GIL holder)"],
        "not_captured": ["core of python3.11 (pid 11): gcore is not installed where the command runs"],
    }
    lines = render_evidence(_entry("stall", content))
    assert lines[0] == (
        "  stall (cpuset=0-1): snapshot at 3.05 s (1.00 s into t.py::test_slow) (threshold 1.00 s), "
        "run ended after 4.20 s, attempt 2"
    )
    assert (
        lines[1]
        == "      frozen 0.4 ms after the deadline, for 0.31 s; processes: dash (10), python3.11 (11, snapshotted)"
    )
    assert lines[2] == "      taken: py-spy dump of 1 of 1 Python process(es) (every thread, GIL holder)"
    assert lines[3] == "      not taken: core of python3.11 (pid 11): gcore is not installed where the command runs"


def test_stall_dump_entry_names_its_process_and_the_gil_holder():
    thread = {"id": 7, "name": "crunch", "state": "running+gil", "active": True, "owns_gil": True, "frames": []}
    content = {"pid": 11, "program": "python3.11", "gil_holder": "crunch", "phase": "stall", "elapsed_s": 1.0}
    lines = render_evidence(_entry("pyspy_dump", {**content, "threads": [thread]}))
    assert lines[0] == "  pyspy_dump (cpuset=0-1): 1 threads of python3.11 (11) at 1.00 s (stall), GIL held by crunch"
    assert lines[1] == '      7 "crunch" running+gil: (no Python frames)'


def test_evidence_runs_table_compares_the_tests_own_duration_with_its_median():
    from services.jobs.report_text import render_text
    from tests.unit.services.jobs.test_report_schema import _minimal_report

    run = {
        "id": 5,
        "config": "cpuset=0-1",
        "test": "t.py::test_x",
        "probe": "core",
        "wall_s": 3.2,  # the whole pytest process, 3 s of it start-up
        "observed_s": 0.2,
        "timing_median_s": 0.1,
        "exit_code": 0,
        "timed_out": False,
    }
    text = render_text(parse_report(_minimal_report(evidence_runs=[run])))
    [row] = [line for line in text.splitlines() if line.strip().startswith("core ")]
    assert "2.0x" in row and "32.0x" not in row, row


def test_a_sharded_screen_names_each_shards_node():
    from services.jobs.report_text import render_text
    from tests.unit.services.jobs.test_report_schema import _minimal_report

    places = [
        {"phase": "screen", "node": "node-a", "locks": ["node"], "shard": 1},
        {"phase": "screen", "node": "node-b", "locks": ["cpu0", "cpu1"], "shard": 2},
        {"phase": "drill", "node": "node-a", "locks": ["node"]},
    ]
    lines = [
        line
        for line in render_text(parse_report(_minimal_report(measured_on=places))).splitlines()
        if " ran on node " in line
    ]
    assert lines == [
        "The screen of shard 1 ran on node node-a, holding the node's measurement lock",
        "The screen of shard 2 ran on node node-b, holding the locks of cpu0, cpu1",
        "The drill ran on node node-a, holding the node's measurement lock",
    ]


def test_the_node_lock_is_named_never_the_workers_path(tmp_path):
    """The report is the job's users'; the worker's lock directory is not theirs to see."""
    from services.measure import nodelock
    from services.settings import Settings

    settings = Settings(database_url="sqlite://", work_dir=tmp_path / "work", node_lock_path=tmp_path / "locks")
    with nodelock.measurement_slot(settings, None) as held:
        assert held.locks == ("node",)
    packing = settings.model_copy(update={"pack_disjoint_cores": True})
    with nodelock.measurement_slot(packing, (0,)) as held:
        assert held.locks == ("cpu0",)
    # What jobs measured before stored: the paths, named the same way now.
    assert nodelock.lock_label(str(tmp_path / "locks")) == "node"
    assert nodelock.lock_label(str(tmp_path / "locks" / "cpu1.lock")) == "cpu1"
