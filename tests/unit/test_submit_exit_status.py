"""`lagtrace submit`'s exit status, as `lagtrace run`'s (docs/reference/cli.md): a report
produced is exit 0 whatever the command did; a failing test is a finding of the report,
named on stderr, not lagtrace failing."""

from __future__ import annotations

from cli.submit import exit_status
from services.jobs.report_schema import parse_report
from tests.unit.services.jobs.test_report_schema import _minimal_report

DONE = {"id": 4, "status": "done", "error": None}


def _failed(title: str, test: str | None, severity: str) -> dict:
    return {
        "id": 9,
        "kind": "command_failed",
        "severity": severity,
        "title": title,
        "detail": "-",
        "config": None,
        "test": test,
        "metrics": {"output_tail": "FAILED tests/test_x.py::test_broken - assert 1 == 2\n1 failed, 588 passed"},
        "evidence": [],
        "fingerprint": "c" * 64,
        "status": "new",
        "regression": False,
    }


def test_a_suite_with_a_failing_test_exits_0_and_names_the_test_on_stderr():
    title = "The test tests/test_x.py::test_broken failed in all 5 runs in every configuration"
    report = parse_report(_minimal_report(findings=[_failed(title, "tests/test_x.py::test_broken", "medium")]))
    status, said = exit_status(DONE, report)
    assert status == 0
    assert said is not None and title in said and "1 failed, 588 passed" in said


def test_a_command_that_failed_in_every_run_is_the_report_s_finding_too():
    title = "The command failed in all 5 runs in every configuration"
    status, said = exit_status(DONE, parse_report(_minimal_report(findings=[_failed(title, None, "high")])))
    assert status == 0 and said is not None and title in said


def test_a_clean_report_exits_0_silently_and_a_failed_job_exits_1():
    assert exit_status(DONE, parse_report(_minimal_report())) == (0, None)
    failed = {"id": 4, "status": "failed", "error": "prepare: installing the dependencies failed"}
    status, said = exit_status(failed, parse_report(_minimal_report()))
    assert status == 1 and said == "lagtrace: job 4 failed: prepare: installing the dependencies failed"
