"""A regressed test's fresh runs: the check run's table lists the runs its annotation (the
finding's detail, services/jobs/gate.py record_findings) counts, the looks' runs the
verdict rests on, not the gate's own run of the suite besides."""

from __future__ import annotations

import re

from services.github.client import _gate_summary
from services.jobs.report_schema import GateTestRow, ReportGate, judged_runs


def test_the_check_run_table_lists_the_runs_the_annotation_counts():
    # The gate's run of the suite (0.21 s), then two looks.
    fresh = [0.21, 0.205, 0.198]
    row = GateTestRow(
        **{"test": "tests/test_x.py::test_slow", "verdict": "regressed", "stored": 9, "jobs": [3, 2, 1]},
        **{"fresh_s": fresh, "stored_median_s": 0.1, "ratio": 2.0, "ratio_low": 1.4, "ratio_high": 2.05},
        **{"p_slower": 0.001, "p_faster": 0.99, "went_on": True, "checked_s": {}, "carried_from": None},
    )
    gate = ReportGate(config="cpuset=0-1", branch="main", min_stored=5, tests=[row], counts={"regressed": 1})
    [line] = [line for line in _gate_summary(gate) if "test_slow" in line]
    listed = line.split("|")[4]
    assert len(re.findall(r"[\d.]+ s\b", listed)) == len(judged_runs(fresh)) == 2
    assert "0.21 s" not in listed
    # Where no look ran, the one run there is is what both count.
    assert judged_runs([0.21]) == [0.21]
