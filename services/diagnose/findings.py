"""What a rule emits before it is stored, and how findings are fingerprinted."""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, field

from services.diagnose.metrics import Metrics


class Severity(enum.StrEnum):
    """Most severe first: the order the report, the inbox and the check run list them in."""

    high = "high"
    medium = "medium"
    low = "low"
    info = "info"


SEVERITY_ORDER = {severity.value: rank for rank, severity in enumerate(Severity)}


def graded(value: float, medium: float, high: float) -> Severity:
    """High from ``high``, medium from ``medium``, else low: a finding's severity from what
    it costs (a ratio, a share of the run), against two thresholds."""
    return Severity.high if value >= high else Severity.medium if value >= medium else Severity.low


@dataclass
class FindingDraft:
    kind: str
    severity: Severity
    title: str
    detail: str
    config_label: str | None = None
    test_id: str | None = None
    evidence_ids: list[int] = field(default_factory=list)
    # Typed per kind (services/diagnose/metrics.py); JSON only once stored (diagnose.py).
    # No default: a draft without its kind's numbers would store {} and say nothing.
    metrics: Metrics = field(kw_only=True)


def fingerprint(project: str, kind: str, scope: str) -> str:
    """The same cause in the same test (or command) of a project, whatever the job.

    Configuration labels and numbers are left out on purpose: a rerun with other CPU
    counts, or a worse ratio next week, is the same problem, and its triage must follow.
    """
    return hashlib.sha256(f"{project}\x1f{kind}\x1f{scope}".encode()).hexdigest()


def format_seconds(seconds: float) -> str:
    return f"{seconds:.3f} s" if seconds >= 0.01 else f"{seconds * 1000:.2f} ms"
