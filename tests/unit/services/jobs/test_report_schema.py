"""The published report schema is generated from the models the report passes through."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from services.jobs.report_schema import SCHEMA_FILE, json_schema, parse_report, report_json


def test_published_schema_matches_the_models():
    published = json.loads(SCHEMA_FILE.read_text())
    assert published == json_schema(), "run `python -m services.jobs.report_schema` and commit the file"


def _minimal_report(**changes):
    report = {
        "schema": "lagtrace.report/v1",
        "job": {
            "id": 1,
            "project": "p",
            "status": "done",
            "created_at": "2026-01-01T00:00:00",
            "finished_at": None,
            "error": None,
        },
        "command": ["python3", "x.py"],
        "executor": "local",
        "workdir": ".",
        "repeat": 3,
        "notes": [],
        "configs": [],
        "tests": [],
        "failed_runs": [],
        "evidence_runs": [],
        "evidence": [],
        "findings": [],
    }
    report.update(changes)
    return report


def test_a_report_with_a_misspelt_evidence_key_is_rejected():
    entry = {
        "id": 1,
        "config": "cpuset=0",
        "test": None,
        "kind": "strace",
        "run": 2,
        "text": None,
        "artifacts": [],
        "content": {"status": "ok", "sycalls": []},
    }
    with pytest.raises(ValidationError, match="sycalls"):
        parse_report(_minimal_report(evidence=[entry]))


def test_an_unknown_top_level_field_is_rejected_and_a_known_one_passes():
    assert parse_report(_minimal_report()).schema_ == "lagtrace.report/v1"
    with pytest.raises(ValidationError):
        parse_report(_minimal_report(extra_field=1))


def test_a_report_read_back_serialises_to_the_json_it_was_read_from():
    # The edges write what was read or built, no default it was not given: a stored report
    # from before a field existed stays without it, and 5 stays 5, not 5.0.
    stored = _minimal_report(thresholds={"min_repetitions": 5, "cpu_sensitivity_ratio": 2.0})
    assert report_json(parse_report(stored)) == stored
    written = report_json(parse_report(stored))
    assert type(written["thresholds"]["min_repetitions"]) is int and "diagnoses" not in written
