"""The text report of a job that failed, and of a command that failed: what went wrong
comes first, and output keeps its lines."""

from __future__ import annotations

from services.jobs.report_schema import parse_report
from services.jobs.report_text import render_text
from tests.unit.services.jobs.test_report_schema import _minimal_report

TAIL = 'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\nImportError: no thing'


def _finding(detail: str) -> dict:
    return {
        "id": 7,
        "kind": "command_failed",
        "severity": "high",
        "title": "The command failed in all 5 runs in every configuration",
        "detail": detail,
        "config": None,
        "test": None,
        "metrics": {},
        "evidence": [],
        "fingerprint": "f" * 64,
        "status": "new",
        "regression": False,
    }


def test_a_failed_job_says_so_and_why_before_anything_else():
    job = {
        "id": 3,
        "project": "p",
        "status": "failed",
        "created_at": "2026-01-01T00:00:00",
        "finished_at": "2026-01-01T00:01:00",
        "error": "installing the dependencies failed (exit 1):\nERROR: No matching distribution found for nope",
    }
    lines = render_text(parse_report(_minimal_report(job=job))).splitlines()
    assert lines[2] == "JOB FAILED: installing the dependencies failed (exit 1):"
    assert lines[3] == "  ERROR: No matching distribution found for nope"
    assert "Nothing below is a verdict" in lines[4]
    # Never the clean bill of a finished job.
    assert "Findings: none" not in lines
    assert "Findings: none (the job failed before any were made)" in lines


def test_a_finished_job_without_findings_reads_as_before():
    lines = render_text(parse_report(_minimal_report())).splitlines()
    assert "Findings: none" in lines and not any(line.startswith("JOB ") for line in lines)


def test_an_output_tail_in_a_detail_keeps_its_lines():
    detail = "No run succeeded in every configuration (exit 1 (5x)). Last output:\n" + TAIL
    text = render_text(parse_report(_minimal_report(findings=[_finding(detail)])))
    lines = text.splitlines()
    start = lines.index("         No run succeeded in every configuration (exit 1 (5x)). Last output:")
    assert lines[start + 1 : start + 4] == ["           " + line for line in TAIL.splitlines()]
