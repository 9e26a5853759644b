"""The drill's amplify plugin (services/measure/probes/amplify.py) in a real pytest process:
it repeats the test up to its planned count, stops once the runs have taken the target
time (a probe that slows the test fills the target in fewer runs), and says in the JUnit
case how many times the test ran."""

import subprocess
import sys

from services.measure import pytest_command
from services.measure.probes import amplify

# Writes "x" per run of its body, and "M"/"F" where its module/function fixtures start.
COUNTS_ITS_RUNS = """
import time

import pytest


@pytest.fixture(scope="module")
def once():
    with open(RUNS, "a") as runs:
        runs.write("M")


@pytest.fixture
def each(tmp_path):
    with open(RUNS, "a") as runs:
        runs.write("F")


def test_counted(once, each, tmp_path_factory):
    with open(RUNS, "a") as runs:
        runs.write("x")
    time.sleep(SLEEP)
"""


def amplified_run(tmp_path, *, sleep_s: float, times: int, target_s: float) -> tuple[int, int | None]:
    """(how many times the test body ran, the count its JUnit case reports); each run had
    its own function-scoped fixtures and shared one module-scoped fixture."""
    runs = tmp_path / "runs"
    (tmp_path / "test_counted.py").write_text(
        COUNTS_ITS_RUNS.replace("RUNS", repr(str(runs))).replace("SLEEP", repr(sleep_s))
    )
    junit = tmp_path / "junit.xml"
    command = pytest_command.with_junit(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_counted.py"], str(junit)
    )
    command, env = amplify.amplified(command, {}, tmp_path, str(tmp_path / amplify.HOOK_DIR), times, target_s)
    result = subprocess.run(command, cwd=tmp_path, env={**env, "PATH": "/usr/bin:/bin"}, capture_output=True)
    assert result.returncode == 0, result.stdout.decode()[-2000:]
    [case] = pytest_command.parse(junit)
    written = runs.read_text()
    body = written.count("x")
    assert written == "M" + "Fx" * body, written
    return body, case.iterations


def test_a_quick_test_with_fixtures_runs_its_planned_count_and_says_so(tmp_path):
    ran, reported = amplified_run(tmp_path, sleep_s=0.0, times=7, target_s=60.0)
    assert ran == reported == 7


def test_runs_slowed_past_the_target_stop_early_and_report_what_ran(tmp_path):
    # Each run takes at least 0.2 s: after three, the 0.5 s target is past, so at most four
    # ran (the last one reported), never the 50 planned from an untraced median.
    ran, reported = amplified_run(tmp_path, sleep_s=0.2, times=50, target_s=0.5)
    assert 2 <= ran <= 4
    assert reported == ran


def test_the_reported_count_is_held_to_the_plan():
    assert amplify.ran(None, 12) == 12  # no plugin said: as planned
    assert amplify.ran(3, 12) == 3
    assert amplify.ran(10_000, 12) == 12  # the job's own output never raises the divisor past the plan
    assert amplify.ran(0, 12) == 1
