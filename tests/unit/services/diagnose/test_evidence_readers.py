"""off_cpu_wait, futex_storm and gil_contention on in-memory jobs and recorded tool output."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.diagnose import futex_storm, gil_contention, off_cpu_wait
from services.diagnose.context import RuleContext
from services.diagnose.findings import Severity
from services.evidence import dump
from services.measure.probes import pyspy
from services.measure.probes.core import parse_gdb
from services.measure.probes.strace import parse_summary
from services.models import RunKind
from services.thresholds import Thresholds
from tests.unit.jobs import evidence, job, run

DATA = Path(__file__).resolve().parents[3] / "unit" / "data"
LIMITS = Thresholds()


def test_off_cpu_wait_names_the_idle_configuration_and_leaves_a_busy_one_alone():
    waiting = job({"cpuset=0": [run(2.0, user_s=0.1, repetition=i) for i in range(1, 6)]})
    [finding] = off_cpu_wait.check(RuleContext(waiting, LIMITS))
    assert finding.kind == "off_cpu_wait" and "95%" in finding.title
    # A symptom: healthy programs wait by design; the kinds that name a cause carry severity.
    assert finding.severity == Severity.low
    busy = job({"cpuset=0": [run(2.0, user_s=1.9, repetition=i) for i in range(1, 6)]})
    assert off_cpu_wait.check(RuleContext(busy, LIMITS)) == []
    short = job({"cpuset=0": [run(0.2, user_s=0.01, repetition=i) for i in range(1, 6)]})
    assert off_cpu_wait.check(RuleContext(short, LIMITS)) == []


def _traced(kind: str, content: dict, test_id: str | None = None, timing_s: float | None = None):
    traced_run = run(1.0, kind=RunKind.evidence, probe=kind)
    timing = [run(timing_s, repetition=i) for i in range(1, 6)] if timing_s else []
    built = job({"cpuset=0-1": [traced_run, *timing]})
    entry = evidence(traced_run, kind=kind, test_id=test_id)
    entry.config = built.configs[0]
    entry.content = content
    built.evidence = [entry]
    return built


def test_futex_storm_on_a_recorded_hand_off_and_not_on_a_reader():
    rows, total = parse_summary((DATA / "strace-handoff.txt").read_text())
    storm = _traced("strace", {"syscalls": rows, "total": total, "top": rows[0]["name"]})
    [finding] = futex_storm.check(RuleContext(storm, LIMITS))
    assert finding.metrics.stored()["futex_pct_time"] > 90 and "futex" in finding.title
    rows, total = parse_summary((DATA / "strace-reads-recv1.txt").read_text())
    reader = _traced("strace", {"syscalls": rows, "total": total})
    assert futex_storm.check(RuleContext(reader, LIMITS)) == []


def test_a_futex_storm_rises_above_low_only_where_its_wake_ups_cost():
    rows, total = parse_summary((DATA / "strace-handoff.txt").read_text())
    content = {"syscalls": rows, "total": total, "top": rows[0]["name"]}
    # 29,149 futex calls, 0.242 s of system time: 24 % of a 1 s run, a storm ...
    [storm] = futex_storm.check(RuleContext(_traced("strace", content, timing_s=1.0), LIMITS))
    assert storm.severity == "high" and storm.metrics.stored()["futex_share_of_run"] == pytest.approx(0.242, abs=0.001)
    assert "29149 calls per second of the 1.000 s untraced median" in storm.detail
    # ... but 2 % of a 12 s run: the same share of syscall time, no cost worth more than a note.
    [note] = futex_storm.check(RuleContext(_traced("strace", content, timing_s=12.0), LIMITS))
    assert note.severity == "low"


def test_gil_contention_from_a_recorded_core_and_a_recorded_py_spy_dump():
    threads, _ = parse_gdb((DATA / "gdb-handoff-py-bt.txt").read_text())
    core = _traced("gdb", {"reader": "gdb", "threads": threads, "waiting_for_gil": 1})
    [finding] = gil_contention.check(RuleContext(core, LIMITS))
    assert finding.severity == "high" and "Waiting for the GIL" in finding.detail
    assert finding.metrics.stored()["threads_waiting_for_gil"] >= 1

    dumped = pyspy.parse_dump((DATA / "pyspy-dump-handoff.json").read_text())
    pyspy_only = _traced("pyspy_dump", {"threads": dumped})
    found = gil_contention.check(RuleContext(pyspy_only, LIMITS))
    holders = [t for t in dumped if t["owns_gil"]]
    runnable = [t for t in dumped if t["active"] and not t["owns_gil"]]
    assert bool(found) == bool(holders and runnable)
    if found:
        assert found[0].severity == "medium"  # py-spy's holder/runnable pair is a hint, gdb is proof


def test_gil_contention_ignores_a_lone_thread_and_unusable_snapshots():
    lone = _traced("gdb", {"threads": [{"id": 1, "lwp": 1, "frames": [], "waiting_for_gil": True}]})
    assert gil_contention.check(RuleContext(lone, LIMITS)) == []
    failed = _traced("gdb", dump_failed())
    assert gil_contention.check(RuleContext(failed, LIMITS)) == []


def dump_failed() -> dict:
    from services.evidence import EvidenceStatus, GdbContent

    return dump(GdbContent(status=EvidenceStatus.failed, reason="gdb failed"))
