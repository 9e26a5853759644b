"""A suite that cannot run (a collection error, no test collected) is named as such, on
recorded pytest output; and a pytest command lagtrace builds writes no cache."""

from __future__ import annotations

from pathlib import Path

from services.diagnose import command_failed
from services.diagnose.context import RuleContext
from services.diagnose.diagnose import scope_of
from services.measure import pytest_command
from services.models import RunKind
from services.thresholds import Thresholds
from tests.unit.jobs import job, run

DATA = Path(__file__).parents[2] / "data"
# tests/unit/data/junit-collection-errors.xml: pytest 9 on a suite whose test_broken.py
# imports a module that does not exist and whose test_syntax.py does not parse (exit 2).
RECORDED = DATA / "junit-collection-errors.xml"
PYTEST_TAIL = (
    "E   SyntaxError: invalid syntax\n"
    "=========================== short test summary info ============================\n"
    "ERROR tests/test_broken.py\nERROR tests/test_syntax.py\n"
    "!!!!!!!!!!!!!!!!!!! Interrupted: 2 errors during collection !!!!!!!!!!!!!!!!!!!!\n2 errors in 1.79s\n"
)


def test_a_collection_error_is_no_test_case_but_a_module_and_its_exception():
    assert pytest_command.parse(RECORDED) == []  # no "tests/test_broken.py::tests.test_broken" that never ran
    assert pytest_command.collection_errors(RECORDED) == [
        pytest_command.CollectionError(
            "tests/test_broken.py", "ModuleNotFoundError: No module named 'nonexistent_module'"
        ),
        pytest_command.CollectionError("tests/test_syntax.py", "SyntaxError: invalid syntax"),
    ]


def test_a_runs_report_is_read_once_for_its_cases_and_its_collection_errors():
    # What a run stores (services/measure/runs.py): both from one reading of the file.
    assert pytest_command.read_junit(RECORDED) == (
        pytest_command.parse(RECORDED),
        pytest_command.collection_errors(RECORDED),
    )
    assert len(pytest_command.read_junit(RECORDED)[1]) == 2


def _pytest_job(configs: dict) -> object:
    built = job(configs)
    built.command = ["python3", "-m", "pytest", "-q"]
    return built


def _tail() -> str:
    return pytest_command.describe_collection_errors(pytest_command.collection_errors(RECORDED)) + PYTEST_TAIL


def test_a_collection_error_is_reported_as_one_with_its_exception_and_no_failing_tests():
    # The screen stopped after the first configuration's first run: the others have none.
    built = _pytest_job({"cpuset=0": [run(1.8, exit_code=2, output_tail=_tail())], "cpuset=0-1": [], "cpus=0.5": []})
    assert pytest_command.suite_failure(2, _tail(), 0) == pytest_command.COLLECTION_ERROR
    [finding] = command_failed.check(RuleContext(built, Thresholds()))
    assert finding.title == (
        "The command stopped at a collection error: pytest could not collect tests/test_broken.py, tests/test_syntax.py"
    )
    assert "ModuleNotFoundError: No module named 'nonexistent_module'" in finding.detail
    assert "Failing tests" not in finding.detail and "passing tests" not in finding.detail
    assert finding.severity == "high" and finding.config_label is None  # no configuration passed
    assert finding.metrics.stored()["failure"] == "collection_error"
    # The tail's lines are pytest's own, without lagtrace's header repeated.
    assert finding.detail.endswith("Last output:\n" + PYTEST_TAIL.rstrip())


def test_a_suite_that_collects_nothing_is_named_and_grouped_apart_from_a_collection_error():
    empty = _pytest_job({"cpuset=0": [run(0.3, exit_code=5, output_tail="no tests ran in 0.01s\n")], "cpus=1": []})
    [nothing] = command_failed.check(RuleContext(empty, Thresholds()))
    assert nothing.title == "The command ran no test: no tests collected (pytest exit 5)"
    assert "no test to run" in nothing.detail and nothing.metrics.stored()["failure"] == "no_tests_collected"
    broken = _pytest_job({"cpuset=0": [run(1.8, exit_code=2, output_tail=_tail())]})
    [collection] = command_failed.check(RuleContext(broken, Thresholds()))
    # One command, two problems: their fingerprints' scopes differ.
    assert scope_of(nothing, empty.command) != scope_of(collection, broken.command)
    # A plain failure keeps its failing tests.
    failing = _pytest_job({"a": [run(1.0, exit_code=1, tests={"t::x": 0.1}, outcomes={"t::x": "failed"})]})
    [plain] = command_failed.check(RuleContext(failing, Thresholds()))
    assert plain.metrics.stored()["failure"] == command_failed.EXITED and "Failing tests: t::x" in plain.detail


def test_the_pytest_command_lagtrace_builds_writes_no_cache():
    built = pytest_command.with_junit(["pytest", "-q"], "/out/junit.xml")
    assert built[-2:] == ["-p", "no:cacheprovider"]
    # A command that reads the cache keeps it (pytest refuses --lf without the plugin).
    assert "no:cacheprovider" not in pytest_command.with_junit(["pytest", "--lf"], "/out/junit.xml")


def test_a_suite_whose_only_run_the_census_traced_is_still_named():
    # The screen stopped at its first run, the census's: traced, and so no timing run.
    traced = run(0.5, kind=RunKind.survey, exit_code=5, output_tail="no tests ran in 0.01s\n", probe="census")
    empty = _pytest_job({"cpuset=0": [], "cpuset=0-1": [traced]})
    [nothing] = command_failed.check(RuleContext(empty, Thresholds()))
    assert nothing.metrics.stored()["failure"] == "no_tests_collected" and nothing.config_label is None
    # A traced run that timed out may be the tracer's doing: no failure is named from it.
    slow = run(9.0, kind=RunKind.survey, exit_code=-9, timed_out=True, probe="census")
    assert command_failed.check(RuleContext(_pytest_job({"cpuset=0": [slow]}), Thresholds())) == []
    # Nor from one that passed.
    passed = run(0.5, kind=RunKind.survey, probe="census")
    assert command_failed.check(RuleContext(_pytest_job({"cpuset=0": [passed]}), Thresholds())) == []
