"""The stall clock's record (recorded from a real run: `sh -c "python3 -c ..."`, frozen at
0.5 s, py-spy present, gcore absent) turned into evidence, and the retry threshold."""

from __future__ import annotations

import shutil
from pathlib import Path

from services.evidence import dump
from services.measure.drill import retry_threshold
from services.measure.executors.base import RunResult
from services.measure.executors.local import LocalExecutor
from services.measure.executors.stall_clock import CLOCK_FILE
from services.measure.probes import ProbeContext
from services.measure.probes.core import CoreProbe
from services.measure.stats import Summary
from services.settings import Settings

DATA = Path(__file__).parent / "data"


def _result(wall_s: float) -> RunResult:
    return RunResult(wall_s, 0.1, 0.0, 10_000, 5, 1, 0, False, None, None, None, None)


def test_record_becomes_stall_dump_and_io_evidence_in_user_words(tmp_path):
    shutil.copy(DATA / "stall-clock-sh-wrapper.json", tmp_path / CLOCK_FILE)
    probe = CoreProbe(ProbeContext(LocalExecutor(Settings()), tmp_path, 0.5, 10.0))
    drafts = probe.collect(_result(3.1))
    by_kind = {draft.kind.value: dump(draft.content) for draft in drafts}
    stall = by_kind["stall"]
    assert stall["status"] == "ok" and stall["clock"] == "process"
    assert stall["freeze_delay_s"] < 0.01 and stall["elapsed_s"] >= 0.5
    # The wrapper was walked down: sh is listed, the Python process under it snapshotted.
    assert [(p["program"], p["python"], p["snapshotted"]) for p in stall["processes"]] == [
        ("dash", False, False),
        ("python3.11", True, True),
    ]
    assert stall["captured"] == [
        "py-spy dump of 1 of 1 Python process(es) (every thread, GIL holder)",
        "/proc io of 1 of 1 Python process(es)",
    ]
    assert stall["not_captured"] == ["core of python3.11 (pid 18863): gcore is not installed where the command runs"]
    assert not any("/tmp" in line or "os error" in line.lower() for line in stall["not_captured"])

    threads = {t["name"]: t for t in by_kind["pyspy_dump"]["threads"]}
    assert threads["napper"]["frames"][0]["function"] == "nap"
    # Frozen, the kernel says what each thread did: both wait in a syscall, none runs.
    assert not any(t["active"] for t in threads.values())
    assert threads["MainThread"]["state"] == "waiting"
    assert by_kind["proc_io"]["counters"]["syscr"] == 667 and by_kind["proc_io"]["program"] == "python3.11"


def test_missing_record_and_no_stall_say_why(tmp_path):
    probe = CoreProbe(ProbeContext(LocalExecutor(Settings()), tmp_path, 0.5, 10.0))
    [draft] = probe.collect(_result(0.2))
    assert draft.content.status == "failed" and "left no record" in (draft.content.reason or "")
    (tmp_path / CLOCK_FILE).write_text('{"per_test": true, "snapshots": [], "tests": []}')
    per_test = CoreProbe(ProbeContext(LocalExecutor(Settings()), tmp_path, 0.5, 10.0, per_test=True))
    [draft] = per_test.collect(_result(2.5))
    assert draft.content.status == "no_stall" and "the test never started" in (draft.content.reason or "")
    (tmp_path / CLOCK_FILE).write_text(
        '{"snapshots": [], "tests": [{"pid": 7, "test": "t.py::test_a", "started_s": 2.0, "ended_s": 2.03}]}'
    )
    [draft] = CoreProbe(ProbeContext(LocalExecutor(Settings()), tmp_path, 0.5, 10.0, per_test=True)).collect(
        _result(2.5)
    )
    assert "the test took 0.030 s, less than the stall threshold of 0.500 s" in (draft.content.reason or "")


def _summary(median: float, ci_low: float) -> Summary:
    return Summary(n=5, median=median, ci_low=ci_low, ci_high=median * 1.2, confidence=0.9)


def test_retry_threshold_comes_from_the_slow_runs_and_stays_above_the_fast_median():
    summaries = {"cpuset=0": _summary(0.126, 0.12), "cpuset=0-1": _summary(1.6, 1.1)}
    # A case seen under load: threshold 1.26 s, the evidence run ended at 0.54 s under load.
    assert retry_threshold(summaries, "cpuset=0-1", 1.26, [0.54]) == 0.27
    # Never below twice the fast configuration's median.
    assert retry_threshold(summaries, "cpuset=0-1", 1.26, [0.1]) == 0.252
    # The fast configuration was never expected to stall: no retry.
    assert retry_threshold(summaries, "cpuset=0", 1.26, [0.13]) is None
