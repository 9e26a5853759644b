"""Warm runs in narrowed pytest processes (services/measure/warm.py), with real pytest."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from services.measure import pytest_command, warm

# `lazy` is the one-time work of a process: the first test to import it pays 0.3 s
# (a module that builds a table at import, as a web framework's routing or a schema
# compiler does); the suite's order decides which test that is.
LAZY = "import time\ntime.sleep(0.3)\nTABLE = {i: i * i for i in range(1000)}\n"
TESTS = """
_seen = set()


def test_a():
    import lazy
    assert lazy.TABLE[3] == 9


def test_b():
    import lazy
    assert lazy.TABLE[4] == 16


def test_once_only():
    assert "x" not in _seen
    _seen.add("x")


def test_broken():
    assert False
"""


def _run(suite: Path, run_dir: Path, tests: list[str], warmed: bool) -> dict[str, pytest_command.TestCase]:
    run_dir.mkdir()
    junit = run_dir / pytest_command.JUNIT_FILE
    command = pytest_command.with_junit(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests], str(junit)
    )
    env = {}
    if warmed:
        command, env = warm.warmed(
            command, {}, run_dir, str(run_dir / warm.HOOK_DIR), str(run_dir / warm.OUTPUT_PREFIX)
        )
    subprocess.run(command, cwd=suite, env={**os.environ, **env}, capture_output=True, check=False)
    return {case.test_id: case for case in pytest_command.parse(junit)}


def test_a_tests_timed_run_does_not_depend_on_whether_it_ran_first(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "lazy.py").write_text(LAZY)
    (suite / "test_lazy.py").write_text(TESTS)
    b = "test_lazy.py::test_b"
    # Without warm runs, test_b pays the import when it runs first and not after test_a.
    alone = _run(suite, tmp_path / "cold-alone", [b], warmed=False)[b].duration_s
    second = _run(suite, tmp_path / "cold-second", ["test_lazy.py::test_a", b], warmed=False)[b].duration_s
    assert alone >= 0.25 and second < 0.1
    # Warmed, both processes time test_b's warm run; its first run is kept apart.
    run_dir = tmp_path / "warm-alone"
    assert _run(suite, run_dir, [b], warmed=True)[b].duration_s < 0.1
    assert warm.first_runs(run_dir)[b] >= 0.25
    assert _run(suite, tmp_path / "warm-second", ["test_lazy.py::test_a", b], warmed=True)[b].duration_s < 0.1


def test_outcomes_are_the_tests_own_and_a_test_that_cannot_repeat_reports_its_first_run(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "lazy.py").write_text(LAZY)
    (suite / "test_lazy.py").write_text(TESTS)
    cases = _run(suite, tmp_path / "run", ["test_lazy.py"], warmed=True)
    assert {test: case.outcome for test, case in cases.items()} == {
        "test_lazy.py::test_a": "passed",
        "test_lazy.py::test_b": "passed",
        "test_lazy.py::test_once_only": "passed",  # its second run fails: the first one is reported
        "test_lazy.py::test_broken": "failed",
    }
    firsts = warm.first_runs(tmp_path / "run")
    assert set(firsts) == {"test_lazy.py::test_a", "test_lazy.py::test_b", "test_lazy.py::test_once_only"}


def test_the_one_time_cost_is_one_note_naming_the_test_that_paid_it():
    cold = {"t::a": [0.31, 0.33, 0.3], "t::b": [0.02, 0.021, 0.02]}
    timed = {"t::a": [0.011, 0.012, 0.01], "t::b": [0.02, 0.02, 0.019]}
    note = warm.first_call_note(cold, timed, min_extra_s=0.05, min_ratio=2.0)
    assert note is not None and note.startswith("first-call cost, not latency")
    assert "1 test(s)" in note and "t::a 0.310 s on its first run against 0.011 s warm (median of 3)" in note
    assert "t::b" not in note
    assert warm.first_call_note({"t::b": cold["t::b"]}, timed, min_extra_s=0.05, min_ratio=2.0) is None
