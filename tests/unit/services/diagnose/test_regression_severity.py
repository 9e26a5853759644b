"""A regression's severity follows its size: a test made 2x slower by one change is a
problem worth a look (medium), not a note; a configuration's ratio keeps its own scale."""

from __future__ import annotations

import pytest

from services.diagnose.findings import Severity, graded
from services.thresholds import Thresholds

LIMITS = Thresholds()


@pytest.mark.parametrize(
    ("ratio", "severity"),
    [(1.25, Severity.low), (1.49, Severity.low), (1.5, Severity.medium), (2.0, Severity.medium), (3.0, Severity.high)],
)
def test_a_regressions_severity_from_its_ratio(ratio, severity):
    assert graded(ratio, LIMITS.regression_medium_ratio, LIMITS.regression_high_ratio) is severity
    # The same 2x across configurations is a cpu_sensitivity finding's low.
    assert graded(2.0, LIMITS.severity_medium_ratio, LIMITS.severity_high_ratio) is Severity.low
