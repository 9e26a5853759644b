"""A stall found in a drill of the whole suite belongs to the test whose clock fired."""

from __future__ import annotations

import pytest

from services.diagnose import stall
from tests.support import jobs

SUITE = {"tests/test_sync.py::test_waits_for_the_peer": 0.3, "tests/test_sync.py::test_quick": 0.01}


def _whole_suite_stall(test: str | None, clock: str = "test"):
    built = jobs.job(["python", "-m", "pytest", "tests"], labels=("cpuset=0", "cpuset=0-1"))
    fast, slow = built.configs
    jobs.timing_runs(fast, [1.0] * 5, tests=SUITE)
    jobs.timing_runs(slow, [1.0] * 5, tests=SUITE)
    content = {
        "status": "ok",
        "stall_after_s": 0.5,
        "clock": clock,
        "test": test,
        "test_elapsed_s": 2.1,
        "elapsed_s": 2.9,
        "wall_s": 3.4,
        "captured": ["py-spy dump of every thread"],
    }
    jobs.evidence(built, slow, "stall", content)  # the whole command's drill: no test_id
    return built


def test_the_stall_of_a_whole_suite_drill_is_the_test_whose_clock_fired():
    [finding] = stall.check(jobs.context(_whole_suite_stall("tests/test_sync.py::test_waits_for_the_peer")))
    assert finding.test_id == "tests/test_sync.py::test_waits_for_the_peer"
    assert finding.title.startswith("tests/test_sync.py::test_waits_for_the_peer stalled past 0.50 s")
    assert "the whole command drilled: its clock fired in this test" in finding.detail
    # 2.1 s into the test against its 0.3 s median.
    assert finding.metrics.stored()["accounts_s"] == pytest.approx(1.8)


def test_a_clock_that_counted_from_the_process_or_an_unknown_node_stays_the_commands():
    [by_process] = stall.check(jobs.context(_whole_suite_stall(None, clock="process")))
    assert by_process.test_id is None and by_process.metrics.stored()["accounts_s"] == pytest.approx(2.4)
    [unknown] = stall.check(jobs.context(_whole_suite_stall("tests/test_other.py::test_gone")))
    assert unknown.test_id is None
