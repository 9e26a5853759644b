"""Stored job JSON read back as the report's models: a gate's verdicts (services/jobs/gate.py
stored_gate), giving the JSON it gave when it was read as dicts."""

from __future__ import annotations

from services.jobs.gate import stored_gate
from services.models import Job


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
