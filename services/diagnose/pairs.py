"""Which two configurations a subject's evidence compares: the slow and the fast one.

A forensic expert does not trace the slowest configuration; she traces the one where the
symptom lives beside the one where it does not, and reads what differs. The drill takes
its evidence in exactly this pair (services/measure/drill.py), and the cause rules
compare the two (``accounts_s``, ``slow_vs_fast``).

A configuration with a CPU quota is slow because of its quota: that share is physics,
not a symptom (cpu_sensitivity's ``Slowdown.expected_s``). So the slow side is a
configuration without a quota wherever one shows the symptom (cpuset=0-1 against
cpuset=0 for threads handing work to each other), and a quota configuration only when
it is slower than its quota explains and no configuration without one shows a slowdown.
"""

from __future__ import annotations

from services.diagnose import cpu_sensitivity
from services.diagnose.context import DrillPair
from services.diagnose.findings import FindingDraft
from services.measure.samples import JobSamples
from services.measure.stats import Summary
from services.thresholds import Thresholds


def choose(
    samples: JobSamples,
    thresholds: Thresholds,
    test_id: str | None,
    summaries: dict[str, Summary],
    findings: list[FindingDraft],
    seed: int = 0,
) -> DrillPair | None:
    """The pair a subject's evidence compares, from its symptom: the slowdown least
    explained by a quota (preferring a slow side without one), else the configuration
    a timing finding names against the fastest, else the slowest configuration without
    a quota against the fastest."""
    if not summaries:
        return None
    quotas = samples.quotas
    fastest = min(summaries, key=lambda label: summaries[label].median)
    candidate = cpu_sensitivity.candidates(samples, thresholds, seed).get(test_id or "")
    if candidate is not None:
        meaningful = [
            s
            for s in cpu_sensitivity.slowdowns(candidate)  # the least explained by a quota first
            if s.unexplained(candidate.summaries) >= thresholds.cpu_sensitivity_ratio
        ]
        preferred = [s for s in meaningful if s.slow not in quotas] or meaningful
        if preferred:
            return DrillPair(preferred[0].slow, preferred[0].fast)
    named = [
        f.config_label
        for f in findings
        if f.test_id == test_id and f.config_label in summaries and f.config_label != fastest
    ]
    if named:
        return DrillPair(named[0], _fast_side(summaries, quotas, exclude=named[0]))
    # No symptom compares two configurations (a slow program, a spread in one): the
    # slowest configuration without a quota beside the fastest, or the fastest alone.
    unquoted_labels = [label for label in summaries if label not in quotas] or list(summaries)
    slowest = max(unquoted_labels, key=lambda label: summaries[label].median)
    return DrillPair(slowest, fastest, compared=False)


def _fast_side(summaries: dict[str, Summary], quotas: dict[str, float], exclude: str) -> str:
    """The fastest other configuration, one without a quota where there is one."""
    others = [label for label in summaries if label != exclude]
    if not others:
        return exclude
    unquoted = [label for label in others if label not in quotas] or others
    return min(unquoted, key=lambda label: summaries[label].median)
