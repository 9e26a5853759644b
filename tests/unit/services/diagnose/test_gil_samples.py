"""GIL waiters told from the futex a blocked thread sleeps on, and the rule that compares
the slow configuration's waits with the fast one's."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from services.diagnose import gil_contention
from services.measure.executors import stall_clock as clock
from tests.support import jobs

REPO = Path(__file__).resolve().parents[4]
DEBIAN_PYTHON = Path("/usr/bin/python3.11")


@pytest.mark.skipif(not DEBIAN_PYTHON.exists(), reason="Debian's python3.11 is not installed here")
def test_runtime_is_found_in_a_stripped_interpreter_by_its_dynamic_symbols_alone():
    sections = subprocess.run(["readelf", "-S", str(DEBIAN_PYTHON)], capture_output=True, text=True).stdout
    assert ".symtab" not in sections and ".debug_info" not in sections  # stripped: debug symbols elsewhere
    address, size, _ = clock.elf_symbol(str(DEBIAN_PYTHON), "_PyRuntime")
    assert address > 0 and size > 1000


def test_no_symbol_in_a_file_that_is_not_elf(tmp_path):
    path = tmp_path / "python3"
    path.write_bytes(b"#!/bin/sh\n")
    assert clock.elf_symbol(str(path), "_PyRuntime") is None


# A waiter is there only while the threads have both cores: beside other work none was
# seen in twenty looks. So it runs in the latency tier.
@pytest.mark.latency
@pytest.mark.parametrize("interpreter", sorted({str(DEBIAN_PYTHON), sys.executable, shutil.which("python3") or ""}))
def test_threads_queueing_for_the_gil_are_seen_without_a_debug_extension(interpreter):
    if not interpreter or not Path(interpreter).exists():
        pytest.skip("interpreter not installed")
    # Threads handing a token through queues while another computes: on two cores some
    # thread waits for the GIL nearly all the time. No figure is judged: only whether a
    # waiter is seen at all in twenty looks.
    program = subprocess.Popen(
        [interpreter, str(REPO / "examples" / "handoff.py"), "1000000"], stdout=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 10
        while clock.gil_range(program.pid) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        found = clock.gil_samples([program.pid])[program.pid]
    finally:
        program.kill()
        program.wait()
    assert found["gil_found"] and found["samples"] == clock.GIL_SAMPLES
    assert found["with_waiter"] >= 1


def _stall(built, config, waiting: int, samples: int = 20, test_id=None, status="ok"):
    content = {
        "status": status,
        "stall_after_s": 0.5,
        "gil_samples": {"processes": [{"pid": 7, "samples": samples, "with_waiter": waiting, "threads": {}}]},
    }
    return jobs.evidence(built, config, "stall", content, test_id=test_id)


def _handoff_job(fast_waiting: int):
    built = jobs.job(labels=("cpuset=0", "cpuset=0-1"))
    fast, slow = built.configs
    jobs.timing_runs(fast, [0.03] * 5)
    jobs.timing_runs(slow, [0.5] * 5)
    _stall(built, slow, waiting=19)
    _stall(built, fast, waiting=fast_waiting)
    return built


def test_waits_present_in_the_slow_configuration_only_are_the_cause():
    [finding] = gil_contention.check(jobs.context(_handoff_job(fast_waiting=0)))
    assert finding.severity == "high"
    assert finding.metrics.stored()["slow_vs_fast"] == (
        "in cpuset=0-1 a thread waited for the GIL in 19 of 20 looks; in cpuset=0, 0 of 20 looks"
    )
    assert finding.metrics.stored()["accounts_s"] == pytest.approx(0.95 * 0.5)


def test_looks_from_a_slow_run_that_ended_before_its_deadline_count():
    # docs/measurements/accuracy.md (without debug information): no evidence run on two cores reached the deadline, so
    # only the looks taken while they ran can say where the time went.
    built = jobs.job(labels=("cpuset=0", "cpuset=0-1"))
    fast, slow = built.configs
    jobs.timing_runs(fast, [0.05] * 5)
    jobs.timing_runs(slow, [0.7] * 5)
    _stall(built, slow, waiting=18, samples=26, status="no_stall")
    _stall(built, fast, waiting=0, samples=5)
    [finding] = gil_contention.check(jobs.context(built))
    assert finding.severity == "high" and "18 of 26 looks" in finding.metrics.stored()["slow_vs_fast"]
    # A run that could not be looked at at all (the tool failed) is still no witness.
    built = jobs.job(labels=("cpuset=0", "cpuset=0-1"))
    fast, slow = built.configs
    jobs.timing_runs(fast, [0.05] * 5)
    jobs.timing_runs(slow, [0.7] * 5)
    _stall(built, slow, waiting=18, samples=26, status="failed")
    assert gil_contention.check(jobs.context(built)) == []


def _recorded_docker_handoff(slow_waiting: int):
    # The hand-off in a container without python3.11-dbg (25 Nov): 1.199 s on two cores
    # against 0.048 s pinned; twenty looks before the deadline on two cores, five on one.
    built = jobs.job(labels=("cpuset=0", "cpuset=0-1"))
    fast, slow = built.configs
    jobs.timing_runs(fast, [0.037, 0.045, 0.048, 0.05, 0.057])
    jobs.timing_runs(slow, [1.106, 1.15, 1.199, 1.3, 1.433])
    _stall(built, slow, waiting=slow_waiting)
    _stall(built, fast, waiting=1, samples=5)
    return built


def test_what_the_waits_cost_decides_not_how_often_they_were_seen():
    # 9 of 20 looks: under half, yet 0.54 s of waiting against 0.01 s, 46 % of the slowdown.
    [finding] = gil_contention.check(jobs.context(_recorded_docker_handoff(slow_waiting=9)))
    assert finding.severity == "medium"
    assert finding.metrics.stored()["accounts_s"] == pytest.approx(0.45 * 1.199 - 0.2 * 0.048)
    # 4 of 20 looks cannot tell a wait from noise.
    assert gil_contention.check(jobs.context(_recorded_docker_handoff(slow_waiting=4))) == []


def test_waits_as_frequent_on_both_sides_of_a_healthy_pair_are_at_most_a_note():
    built = jobs.job(labels=("cpuset=0", "cpuset=0-1"))
    fast, slow = built.configs
    # A thread pool whose threads wait for the GIL now and then, equally slow everywhere.
    jobs.timing_runs(fast, [1.0] * 5)
    jobs.timing_runs(slow, [1.02] * 5)
    _stall(built, slow, waiting=12)
    _stall(built, fast, waiting=12)
    assert [f.severity for f in gil_contention.check(jobs.context(built))] == ["low"]


def test_waits_the_fast_side_has_as_much_of_explain_nothing():
    built = jobs.job(labels=("cpuset=0", "cpuset=0-1"))
    fast, slow = built.configs
    jobs.timing_runs(fast, [0.2] * 5)
    jobs.timing_runs(slow, [0.5] * 5)
    _stall(built, slow, waiting=10)  # 0.25 s waiting of 0.5 s ...
    _stall(built, fast, waiting=20)  # ... against 0.2 s of 0.2 s: 0.05 s of a 0.3 s slowdown
    [finding] = gil_contention.check(jobs.context(built))
    assert finding.severity == "low" and finding.metrics.stored()["accounts_s"] == pytest.approx(0.05)


def test_the_fast_sides_early_snapshot_is_no_stall():
    from services.diagnose import stall

    built = jobs.job(labels=("cpuset=0", "cpuset=0-1"))
    fast, slow = built.configs
    jobs.timing_runs(fast, [0.03] * 5)
    jobs.timing_runs(slow, [0.5] * 5)
    compared = _stall(built, fast, waiting=0)
    compared.content = {**compared.content, "comparison": True, "wall_s": 0.03}
    assert stall.check(jobs.context(built)) == []
    _stall(built, slow, waiting=19)
    assert [f.config_label for f in stall.check(jobs.context(built))] == ["cpuset=0-1"]


def test_a_repeated_short_test_s_snapshot_is_no_stall_unless_it_hung():
    from services.diagnose import stall

    built = jobs.job(labels=("cpuset=0", "cpuset=0-1"))
    fast, slow = built.configs
    jobs.timing_runs(fast, [0.03] * 5)
    jobs.timing_runs(slow, [0.3] * 5)
    repeated = _stall(built, slow, waiting=19)
    timing = {"run_id": 1, "wall_s": 1.6, "observed_s": 0.3, "exit_code": 0, "timed_out": False, "iterations": 4}
    repeated.content = {**repeated.content, "run": timing}
    assert stall.check(jobs.context(built)) == []  # its deadline fell in the second of four repetitions
    repeated.content = {**repeated.content, "timed_out": True}
    assert [f.config_label for f in stall.check(jobs.context(built))] == ["cpuset=0-1"]


def test_waits_the_fast_side_has_more_of_account_for_nothing_never_negative_seconds():
    built = jobs.job(labels=("cpuset=0", "cpuset=0-1"))
    fast, slow = built.configs
    jobs.timing_runs(fast, [1.0] * 5)
    jobs.timing_runs(slow, [1.02] * 5)
    _stall(built, slow, waiting=12)  # 0.61 s of 1.02 s waiting ...
    _stall(built, fast, waiting=16)  # ... against 0.8 s of 1.0 s: the fast side waited more
    findings = gil_contention.check(jobs.context(built))
    assert findings, "a note on the waits is still made"
    for finding in findings:
        assert finding.metrics.stored()["accounts_s"] == 0.0
        assert "account for none of the difference" in finding.detail
