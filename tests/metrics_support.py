"""Findings' metrics whole, as their rules state them (services/diagnose/metrics.py), for
tests that store or read a finding: a partial shape is kept as stored, and a reader of
typed fields finds none of them in it."""

from __future__ import annotations

from typing import Any

from services.diagnose.metrics import ConfigMedian, CpuSensitivityMetrics


def cpu_sensitivity(slow: tuple[str, float], fast: tuple[str, float], **extra: Any) -> CpuSensitivityMetrics:
    """A cpu_sensitivity finding's metrics: ``slow`` and ``fast`` are (configuration label,
    median seconds), each over 5 runs; ``extra`` sets any other field."""

    def median(label: str, seconds: float) -> ConfigMedian:
        return ConfigMedian(
            config=label, median=seconds, ci_low=seconds * 0.95, ci_high=seconds * 1.05, n=5, confidence=0.94
        )

    stated: dict[str, Any] = dict(
        ratio=slow[1] / fast[1],
        slower_by_s=slow[1] - fast[1],
        slow=median(*slow),
        fast=median(*fast),
        medians=dict([fast, slow]),
        p_value=0.008,
        fdr=0.05,
        family_size=1,
        method="Mann-Whitney U, Benjamini-Hochberg",
    )
    return CpuSensitivityMetrics(**{**stated, **extra})
