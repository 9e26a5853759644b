"""A job's test durations are its own numbers, lagtrace's timer is not: a conftest that
halves report.duration is caught by `lagtrace run` itself, and its healthy twin is not
(services/diagnose/timing_disagrees.py, docs/reference/findings.md)."""

from __future__ import annotations

import sys

import pytest
from sqlalchemy import select

from services.db import make_engine, make_session_factory
from services.models import Run, RunKind
from services.settings import Settings
from tests.conftest import run_cli

SUITE = """\
import time


def test_sleeps():
    time.sleep(0.6)


def test_quick():
    pass
"""
# The job's own code, rewriting the duration pytest measured before the JUnit XML records it.
HALVING = """\
import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report):
    if report.nodeid.endswith("test_sleeps"):
        report.duration /= 2
"""
SLEEPS = "test_suite.py::test_sleeps"


def lagtrace_run(database_url, suite, out, *pytest_args: str) -> dict:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args]
    args = ["run", "--executor", "local", "--config", "cpuset=0", "--config", "cpuset=0-1", "--repeat", "3"]
    args += ["--evidence", "none", "--workdir", str(suite), "--json", str(out), "--", *command]
    result = run_cli(args, database_url)
    assert result.returncode == 0, result.stderr
    return result.report(out)


# A verdict on a run's wall time: beside other CPU work a run alone waits for its core, the
# kernel's count of that wait widens the bound, and a halved 0.6 s test may fall under the
# ratio (tests/unit/services/diagnose/test_timing_disagrees.py, behind two busy loops).
@pytest.mark.latency
@pytest.mark.parametrize("halved", [True, False], ids=["halving-conftest", "healthy-twin"])
def test_a_test_run_alone_whose_duration_is_halved_disagrees_with_the_timer(sqlite_url, tmp_path, halved):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_suite.py").write_text(SUITE)
    if halved:
        (suite / "conftest.py").write_text(HALVING)
    report = lagtrace_run(sqlite_url, suite, tmp_path / "report.json", SLEEPS)
    found = [f for f in report["findings"] if f["kind"] == "timing_disagrees"]
    [test] = report["tests"]
    median = test["configs"][0]["median"]
    if not halved:
        assert found == [], found
        assert median == pytest.approx(0.6, abs=0.05)
        return
    # The verdicts stand on what the job reported (half of 0.6 s); the finding says so.
    assert median == pytest.approx(0.3, abs=0.05)
    [finding] = found
    assert finding["test"] == SLEEPS and finding["severity"] == "medium"
    assert finding["config"] in ("cpuset=0", "cpuset=0-1")
    metrics = finding["metrics"]
    assert metrics["direction"] == "under" and metrics["workers"] == 1
    assert metrics["reported_s"] == pytest.approx(0.3, abs=0.02)
    # About the 0.3 s the conftest took off (a sleep lasts at least its time, and pytest's
    # start-up computes), past the thresholds.
    assert 0.2 <= metrics["gap_s"] <= 0.6 and metrics["ratio"] >= 1.25
    assert len(metrics["runs"]) == 3
    # The title states what the job reported, as measured (0.300 s give or take the clock).
    assert f"reports {metrics['reported_s']:.3f} s" in finding["title"], finding["title"]
    assert "report.duration" in finding["detail"]


def test_the_workers_a_run_had_are_read_from_its_configuration_and_stored(sqlite_url, tmp_path):
    # pytest-xdist's -n in addopts is read when the run is taken (the checkout is gone
    # when the rules run): each run stores its 2 workers, and the healthy suite, whose
    # tests add up to no more than two workers' wall time, gets no finding.
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_suite.py").write_text(SUITE)
    (suite / "pytest.ini").write_text("[pytest]\naddopts = -n 2\n")
    report = lagtrace_run(sqlite_url, suite, tmp_path / "report.json")
    assert [f for f in report["findings"] if f["kind"] == "timing_disagrees"] == []
    engine = make_engine(Settings(database_url=sqlite_url))
    try:
        with make_session_factory(engine)() as session:
            workers = set(session.scalars(select(Run.test_workers).where(Run.kind == RunKind.timing)))
    finally:
        engine.dispose()
    assert workers == {2}
