"""latency_flaky: within one configuration the runs fall into groups or scatter widely.

A latency that is sometimes 0.1 s and sometimes 0.5 s under identical conditions has a
hidden state (a stale lock, a cold cache, a retry, a timer race); a median alone hides
it, so the distribution is judged directly.
"""

from __future__ import annotations

import math
import statistics

from services.diagnose.context import RuleContext
from services.diagnose.findings import FindingDraft, Severity, format_seconds
from services.thresholds import Thresholds


def modes(values: list[float], limits: Thresholds) -> tuple[list[float], list[float]] | None:
    """The fast and slow groups of a multi-modal sample, or None.

    The split is at the largest ratio between neighbouring sorted values, each side
    holding at least a fifth of the runs (and two of them).
    """
    data = sorted(values)
    n = len(data)
    smallest = max(2, math.ceil(0.2 * n))
    best = None
    for i in range(smallest, n - smallest + 1):
        if data[i - 1] <= 0:
            continue
        ratio = data[i] / data[i - 1]
        if best is None or ratio > best[0]:
            best = (ratio, i)
    if best is None:
        return None
    fast, slow = data[: best[1]], data[best[1] :]
    gap = statistics.median(slow) / statistics.median(fast)
    spread = statistics.median(slow) - statistics.median(fast)
    if gap >= limits.flaky_gap_ratio and spread >= limits.flaky_min_spread_s:
        return fast, slow
    return None


def dispersed(values: list[float], limits: Thresholds) -> bool:
    quartiles = statistics.quantiles(values, n=4)
    iqr = quartiles[2] - quartiles[0]
    median = statistics.median(values)
    return median > 0 and iqr >= limits.flaky_dispersion * median and iqr >= limits.flaky_min_spread_s


def check(context: RuleContext) -> list[FindingDraft]:
    limits = context.thresholds
    drafts = []
    series = [(None, context.samples.wall), *list(context.samples.tests.items())]
    for test_id, per_config in series:
        for label, values in per_config.items():
            if len(values) < limits.flaky_min_runs:
                continue
            draft = _judge(values, limits, label, test_id)
            if draft:
                drafts.append(draft)
                break  # one finding per test (or command): the first configuration that shows it
    return drafts


def _judge(values: list[float], limits: Thresholds, label: str, test_id: str | None) -> FindingDraft | None:
    subject = test_id or "The command"
    found = modes(values, limits)
    runs = ", ".join(format_seconds(v) for v in values)
    if found:
        fast, slow = found
        ratio = statistics.median(slow) / statistics.median(fast)
        return FindingDraft(
            kind="latency_flaky",
            severity=Severity.medium,
            title=f"{subject} has two latencies with {label}: {len(slow)} of {len(values)} runs {ratio:.1f}x slower",
            detail=(
                f"{len(fast)} runs around {format_seconds(statistics.median(fast))}, {len(slow)} around "
                f"{format_seconds(statistics.median(slow))} under the same configuration ({label}); runs: {runs}. "
                f"Something varies between runs: a lock or file left by a previous run, a cache, a retry, a timer"
            ),
            config_label=label,
            test_id=test_id,
            metrics={"pattern": "multimodal", "ratio": ratio, "fast_runs": fast, "slow_runs": slow, "runs": values},
        )
    if dispersed(values, limits):
        quartiles = statistics.quantiles(values, n=4)
        median = statistics.median(values)
        return FindingDraft(
            kind="latency_flaky",
            severity=Severity.low,
            title=f"{subject} varies widely between runs with {label}",
            detail=(
                f"interquartile range {format_seconds(quartiles[2] - quartiles[0])} around a median of "
                f"{format_seconds(median)} ({(quartiles[2] - quartiles[0]) / median:.0%}); runs: {runs}"
            ),
            config_label=label,
            test_id=test_id,
            metrics={"pattern": "dispersed", "iqr_s": quartiles[2] - quartiles[0], "median_s": median, "runs": values},
        )
    return None
