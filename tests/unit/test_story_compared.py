"""A finding page's symptom compares two configurations, never one with itself
(web/story.py compared): a slow_startup found in the fastest configuration once read
"1.0x slower with cpuset=0 (1.25 s median) than with cpuset=0 (1.25 s median)"."""

from __future__ import annotations

from services.diagnose.diagnoses import _symptom
from services.diagnose.metrics import CpuSensitivityMetrics, metrics_of
from services.diagnose.report_parts import ReportFinding
from web.story import compared

MEDIANS = {"cpuset=0": 1.25, "cpuset=0-1": 4.03}


def test_a_finding_in_the_fastest_configuration_is_compared_with_nothing():
    assert compared(MEDIANS, "cpuset=0") == ("cpuset=0", None)
    assert compared({"cpuset=0": 1.25}, "cpuset=0") == ("cpuset=0", None)
    # Two configurations of the same median: no "1.0x slower" either.
    assert compared({"cpuset=0": 1.25, "cpus=0.5": 1.25}, "cpus=0.5") == ("cpus=0.5", None)


def test_a_finding_in_a_slower_configuration_is_compared_with_the_fastest():
    assert compared(MEDIANS, "cpuset=0-1") == ("cpuset=0-1", "cpuset=0")
    assert compared(MEDIANS, None) == ("cpuset=0-1", "cpuset=0")
    assert compared({}, None) == (None, None)


def test_a_symptom_line_never_compares_a_configuration_with_itself():
    same = {"config": "cpuset=0", "median": 1.25, "ci_low": 1.2, "ci_high": 1.3, "n": 5, "confidence": 0.94}
    metrics = {
        **{"ratio": 1.0, "slower_by_s": 0.0, "slow": same, "fast": same, "medians": {"cpuset=0": 1.25}},
        **{"p_value": 1.0, "fdr": 1.0, "family_size": 1, "method": "mann-whitney"},
    }
    # Read as the kind's own model, or the line below would not be the one under test.
    assert isinstance(metrics_of("cpu_sensitivity", metrics), CpuSensitivityMetrics)
    finding = ReportFinding.model_validate(
        {
            "id": 1,
            "kind": "cpu_sensitivity",
            "severity": "low",
            "title": "The command takes 1.25 s with cpuset=0",
            "detail": "-",
            "config": "cpuset=0",
            "test": None,
            "metrics": metrics,
            "evidence": [],
            "fingerprint": "a" * 64,
            "status": "new",
            "regression": False,
        }
    )
    assert "than with" not in _symptom(finding)
