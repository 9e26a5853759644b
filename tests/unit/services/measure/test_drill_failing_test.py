"""A suite in which one test fails is still measured: pytest exits 1 in every run, yet
the passing tests were timed, so the drill traces what the screen found among them and
its note never says that nothing succeeded (docs/reference/findings.md, command_failed)."""

from __future__ import annotations

from pathlib import Path

from services.jobs.drill_targets import drill_targets
from services.measure.drill import NO_TARGETS, NO_TARGETS_ALL_FAILED, no_targets
from services.measure.pytest_command import PYTEST_TESTS_FAILED
from services.settings import Settings
from tests.support import jobs

PYTEST = ["python", "-m", "pytest", "-q", "tests"]


def _suite_with_a_failing_test(slow_on_two_cores: float) -> jobs.Job:
    built = jobs.job(PYTEST, labels=("cpuset=0", "cpuset=0-1"))
    fast = {f"t.py::test_{i}": 0.1 for i in range(6)}
    slow = {**fast, "t.py::test_5": slow_on_two_cores}
    for config, tests in zip(built.configs, (fast, slow), strict=True):
        for run in jobs.timing_runs(config, [0.8, 0.81, 0.79, 0.8, 0.82], tests={**tests, "t.py::test_broken": 0.01}):
            run.exit_code = PYTEST_TESTS_FAILED
            broken = next(result for result in run.test_results if result.test_id == "t.py::test_broken")
            broken.outcome = "failed"
    return built


def test_a_test_the_screen_flags_is_drilled_although_another_test_fails_in_every_run():
    built = _suite_with_a_failing_test(slow_on_two_cores=1.0)
    drilled = [target.test_id for target in drill_targets(built, Settings(), Path("."))]
    assert drilled == ["t.py::test_5"]


def test_the_note_of_a_suite_with_a_failing_test_and_nothing_flagged_is_not_that_nothing_succeeded():
    built = _suite_with_a_failing_test(slow_on_two_cores=0.1)
    assert drill_targets(built, Settings(), Path(".")) == []
    assert no_targets(built) == NO_TARGETS


def test_a_suite_that_ran_no_test_through_still_says_nothing_succeeded():
    built = jobs.job(PYTEST, labels=("cpuset=0",))
    for run in jobs.timing_runs(built.configs[0], [0.3, 0.3, 0.3]):
        run.exit_code = 2  # interrupted: a collection error, no test timed
    assert no_targets(built) == NO_TARGETS_ALL_FAILED
