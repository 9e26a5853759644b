"""Stored job JSON read back as the report's models: a gate's verdicts (services/jobs/gate.py
stored_gate) and a parent's page digest against its rerun (services/jobs/submit.py
compare_reports), each giving the JSON it gave when it was read as dicts."""

from __future__ import annotations

from services.jobs.gate import stored_gate
from services.jobs.report_schema import parse_report
from services.jobs.submit import compare_reports
from services.jobs.summaries import page_digest, read_page
from services.models import Job
from tests.unit.services.jobs.test_report_schema import _minimal_report


def _gate_row(test: str, verdict: str) -> dict:
    # As gates stored it before flagged tests were checked in every configuration: no
    # checked_s, no carried_from.
    return {
        "test": test,
        "verdict": verdict,
        "stored": 8,
        "jobs": [4, 3],
        "fresh_s": [0.2, 0.21],
        "stored_median_s": 0.1,
        "ratio": 2,
        "ratio_low": 1.8,
        "ratio_high": 2.3,
        "p_slower": 0.001,
        "p_faster": 0.99,
        "went_on": True,
    }


def test_a_gate_stored_before_flagged_tests_were_checked_reads_as_none_checked():
    stored = {
        "config": "cpuset=0-1",
        "branch": "main",
        "min_stored": 5,
        "tests": [
            _gate_row("t.py::a", "regressed"),
            _gate_row("t.py::b", "unchanged"),
            _gate_row("t.py::c", "regressed"),
        ],
    }
    gate = stored_gate(Job(gate=stored))
    assert gate is not None
    assert [(t.checked_s, t.carried_from) for t in gate.tests] == [({}, None)] * 3
    assert gate.counts == {"regressed": 2, "unchanged": 1}
    # The report's JSON holds both keys, and a stored 2 stays 2.
    written = gate.model_dump(mode="json", exclude_unset=True)
    assert written["tests"][0] == {**_gate_row("t.py::a", "regressed"), "checked_s": {}, "carried_from": None}
    assert type(written["tests"][0]["ratio"]) is int
    assert stored_gate(Job(gate=None)) is None


def _config(label: str, median: float | int | None) -> dict:
    interval = {"median": median, "ci_low": median, "ci_high": median, "n": 3, "confidence": 0.75}
    return {"label": label, "cpus": None, "cpuset": label[7:], "runs": [], "wall_s": interval if median else None}


def _finding(id: int, kind: str, fingerprint: str) -> dict:
    return {
        "id": id,
        "kind": kind,
        "severity": "medium",
        "title": kind,
        "detail": kind,
        "config": None,
        "test": None,
        "metrics": {},
        "evidence": [],
        "fingerprint": fingerprint,
        "status": "new",
        "regression": False,
    }


def test_a_rerun_compares_with_its_parent_from_its_digest_or_its_report_alike():
    parent = _minimal_report(
        configs=[_config("cpuset=0", 2), _config("cpuset=1", None)],
        findings=[_finding(1, "stall", "a" * 64), _finding(2, "hot_path", "b" * 64)],
    )
    child = _minimal_report(
        job={**parent["job"], "id": 2},
        configs=[_config("cpuset=0", 3.0), _config("cpuset=0-1", 1.5)],
        findings=[_finding(3, "stall", "a" * 64), _finding(4, "tiny_reads", "c" * 64)],
    )
    parent_page = read_page(page_digest(parse_report(parent)))
    compared = compare_reports(parent_page, parse_report(child))
    assert compared == compare_reports(parent_page, read_page(page_digest(parse_report(child))))
    assert compared == {
        "parent_id": 1,
        "configs": [
            {"label": "cpuset=0", "parent_median_s": 2, "median_s": 3.0, "ratio": 1.5},
            {"label": "cpuset=1", "parent_median_s": None, "median_s": None, "ratio": None},
            {"label": "cpuset=0-1", "parent_median_s": None, "median_s": 1.5, "ratio": None},
        ],
        "median_ratio_shared_configs": 1.5,
        "findings": {"still": ["stall"], "new": ["tiny_reads"], "gone": ["hot_path"]},
    }
    assert type(compared["configs"][0]["parent_median_s"]) is int
