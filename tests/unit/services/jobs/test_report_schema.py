"""The published report schema is generated from the models the report passes through."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from services.jobs.report_schema import SCHEMA_FILE, json_schema, validated


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
        validated(_minimal_report(evidence=[entry]))


def test_an_unknown_top_level_field_is_rejected_and_a_known_one_passes():
    assert validated(_minimal_report())["schema"] == "lagtrace.report/v1"
    with pytest.raises(ValidationError):
        validated(_minimal_report(extra_field=1))
