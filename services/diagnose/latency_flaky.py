"""latency_flaky: within one configuration the runs fall into groups or scatter widely.

A latency that is sometimes 0.1 s and sometimes 0.5 s under identical conditions has a
hidden state (a stale lock, a cold cache, a retry, a timer race); a median alone hides
it, so the distribution is judged directly.
"""

from __future__ import annotations

import math
import statistics

from services.diagnose.context import RuleContext
from services.diagnose.findings import SEVERITY_ORDER, FindingDraft, Severity, format_seconds
from services.diagnose.metrics import GroupsLoad, LatencyFlakyDispersedMetrics, LatencyFlakyModesMetrics
from services.diagnose.neighbours import confounded
from services.measure.cgroups import THROTTLE_PAUSE_S
from services.measure.samples import WALL_RESOLUTION_S, JobSamples
from services.thresholds import Thresholds

# Under a quota, runs that differ by at most one throttling pause differ by the quota's
# phase, which is physics, not hidden state: a healthy 50 ms program under cpus=0.5
# takes 0.05-0.13 s (CI, 22 Nov). Its configurations without a quota judge its latency.


def modes(
    values: list[float], limits: Thresholds, resolution: float = WALL_RESOLUTION_S
) -> tuple[list[float], list[float]] | None:
    """The fast and slow groups of a multi-modal sample, or None.

    Two modes are two groups with an empty gap between them, wider than either group
    is itself; a long tail is not. The runs of a long-tailed latency (a scheduler delay,
    a busy neighbour) fill the range between the typical run and the slowest: split at
    their widest gap, the top two of five are often 2x the bottom three by their
    medians, but the two nearest runs across the split are close and the groups as
    wide as the gap. Hidden state (a stale lock, a cold cache, a lost wake-up) gives
    runs that cluster around two values, and nothing in between.

    So the split is at the largest ratio between neighbouring sorted values (each side
    at least ``flaky_min_group_share`` of the runs, and two of them), and it counts when (a) the nearest
    runs across it are ``flaky_gap_ratio`` apart, (b) that gap, on a log scale, is
    wider than the spread within each group, and (c) the groups' medians lie
    ``flaky_min_spread_s`` apart. Ratios, not differences, because latency noise is
    multiplicative. Values below the clock's resolution count as the resolution: a
    fast group of 0.000 s (JUnit's 1 ms) is "at most 1 ms", and its ratio to the slow
    group a lower bound, not a division by zero.
    """
    data = sorted(values)
    n = len(data)
    smallest = max(2, math.ceil(limits.flaky_min_group_share * n))
    floor = max(resolution, 1e-12)
    logs = [math.log(max(value, floor)) for value in data]
    best = None
    for i in range(smallest, n - smallest + 1):
        gap = logs[i] - logs[i - 1]
        if gap > 0 and (best is None or gap > best[0]):
            best = (gap, i)
    if best is None:
        return None
    gap, split = best
    fast, slow = data[:split], data[split:]
    within = max(logs[split - 1] - logs[0], logs[-1] - logs[split])
    spread = statistics.median(slow) - statistics.median(fast)
    if gap >= math.log(limits.flaky_gap_ratio) and gap > within and spread >= limits.flaky_min_spread_s:
        return fast, slow
    return None


def dispersed(values: list[float], limits: Thresholds) -> bool:
    quartiles = statistics.quantiles(values, n=4)
    iqr = quartiles[2] - quartiles[0]
    median = statistics.median(values)
    return median > 0 and iqr >= limits.flaky_dispersion * median and iqr >= limits.flaky_min_spread_s


def check(context: RuleContext) -> list[FindingDraft]:
    return judge(context.samples, context.thresholds)


def judge(samples: JobSamples, limits: Thresholds) -> list[FindingDraft]:
    drafts = []
    runs_needed = max(limits.flaky_min_runs, limits.min_repetitions)
    for test_id, per_config, resolution in samples.series():
        found = [
            draft
            for label, values in per_config.items()
            if len(values) >= runs_needed
            and (
                draft := _judge(
                    values, limits, label, test_id, resolution, samples.load(test_id, label), samples.quotas.get(label)
                )
            )
        ]
        if found:
            # One finding per test (or command): the most severe configuration's, the
            # first of those. Two latencies under cpus=0.5 are not hidden behind a
            # scatter that cpuset=0, judged first, happened to show.
            drafts.append(min(found, key=lambda draft: SEVERITY_ORDER[draft.severity]))
    return drafts


def _judge(
    values: list[float],
    limits: Thresholds,
    label: str,
    test_id: str | None,
    resolution: float,
    loads: list[float] | None = None,
    quota: float | None = None,
) -> FindingDraft | None:
    subject = test_id or "The command"
    found = modes(values, limits, resolution)
    runs = ", ".join(format_seconds(v) for v in values)
    if found:
        fast, slow = found
        fast_median = statistics.median(fast)
        if quota is not None and statistics.median(slow) - fast_median <= THROTTLE_PAUSE_S:
            return None  # the quota's phase (THROTTLE_PAUSE_S)
        below = fast_median < resolution
        ratio = statistics.median(slow) / max(fast_median, resolution)
        slower = f"{'at least ' if below else ''}{ratio:.1f}x slower"
        groups = (
            f"{len(fast)} runs around {format_seconds(fast_median)}, {len(slow)} around "
            f"{format_seconds(statistics.median(slow))}"
        )

        def draft(severity: Severity, title: str, detail: str, load: GroupsLoad | None = None) -> FindingDraft:
            return FindingDraft(
                kind="latency_flaky",
                severity=severity,
                title=f"{subject} has two latencies with {label}{title}",
                detail=detail,
                config_label=label,
                test_id=test_id,
                metrics=LatencyFlakyModesMetrics(
                    ratio=ratio, fast_runs=fast, slow_runs=slow, runs=values, neighbour_load=load
                ),
            )

        # The groups are split by value (every slow run is above every fast one), so a
        # run's group is its value's side of the split.
        neighbours = loads and confounded(
            [load for value, load in zip(values, loads, strict=True) if value < min(slow)],
            [load for value, load in zip(values, loads, strict=True) if value >= min(slow)],
        )
        if neighbours:
            # Two latencies that follow the machine's other work are no hidden state of
            # the program's: a note that the screen should be repeated on a quiet machine.
            return draft(
                Severity.low,
                ", which follow the machine's other work",
                f"{groups} ({label}); runs: {runs}. {neighbours.describe('fast', 'slow')}: "
                f"screen again on a quiet machine",
                GroupsLoad(fast=neighbours.first, slow=neighbours.second),
            )
        return draft(
            Severity.medium,
            f": {len(slow)} of {len(values)} runs {slower}",
            f"{groups} under the same configuration ({label}); runs: {runs}. "
            f"Something varies between runs: a lock or file left by a previous run, a cache, a retry, a timer",
        )
    if dispersed(values, limits):
        quartiles = statistics.quantiles(values, n=4)
        median = statistics.median(values)
        if quota is not None and quartiles[2] - quartiles[0] <= THROTTLE_PAUSE_S:
            return None  # the quota's phase (THROTTLE_PAUSE_S)
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
            metrics=LatencyFlakyDispersedMetrics(iqr_s=quartiles[2] - quartiles[0], median_s=median, runs=values),
        )
    return None
