"""cpu_sensitivity: latency that depends on the CPU configuration (DESIGN.md section 5)."""

from __future__ import annotations

from services.diagnose.context import RuleContext
from services.diagnose.findings import FindingDraft, Severity
from services.diagnose.findings import format_seconds as _s
from services.measure.stats import Summary, compare
from services.thresholds import Thresholds


def check(context: RuleContext) -> list[FindingDraft]:
    samples, thresholds = context.samples, context.thresholds
    drafts = []
    whole = _check_one(samples.wall_summaries(), thresholds, "The command", test_id=None)
    if whole:
        drafts.append(whole)
    for test_id in samples.tests:
        draft = _check_one(samples.test_summaries(test_id), thresholds, test_id, test_id=test_id)
        if draft:
            drafts.append(draft)
    return drafts


def _check_one(
    summaries: dict[str, Summary], thresholds: Thresholds, subject: str, test_id: str | None
) -> FindingDraft | None:
    comparison = compare(summaries)
    if comparison is None or not comparison.is_sensitive(thresholds.cpu_sensitivity_ratio):
        return None
    slow, fast = summaries[comparison.slow], summaries[comparison.fast]
    ratio = comparison.ratio
    if ratio >= thresholds.severity_high_ratio:
        severity = Severity.high
    elif ratio >= thresholds.severity_medium_ratio:
        severity = Severity.medium
    else:
        severity = Severity.low
    others = [
        f"{label}: {summaries[label].median / fast.median:.1f}x"
        for label in summaries
        if label not in (comparison.slow, comparison.fast) and fast.median > 0
    ]
    detail = (
        f"median {_s(slow.median)} [{_s(slow.ci_low)} .. {_s(slow.ci_high)}] with {comparison.slow} "
        f"vs {_s(fast.median)} [{_s(fast.ci_low)} .. {_s(fast.ci_high)}] with {comparison.fast}: "
        f"{ratio:.1f}x; the intervals do not overlap "
        f"(n={slow.n} at {slow.confidence:.0%} and n={fast.n} at {fast.confidence:.0%} confidence)"
        + (f"; others vs {comparison.fast}: {', '.join(others)}" if others else "")
    )
    return FindingDraft(
        kind="cpu_sensitivity",
        severity=severity,
        title=f"{subject} is {ratio:.1f}x slower with {comparison.slow} than with {comparison.fast}",
        detail=detail,
        config_label=comparison.slow,
        test_id=test_id,
        metrics={
            "ratio": ratio,
            "slow": {"config": comparison.slow, **slow.as_dict()},
            "fast": {"config": comparison.fast, **fast.as_dict()},
            "medians": {label: summary.median for label, summary in summaries.items()},
        },
    )
