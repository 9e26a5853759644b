"""cpu_sensitivity: latency that depends on the CPU configuration (docs/reference/findings.md).

Three gates, each for its own reason:

1. Enough to judge. Only configurations with ``min_repetitions`` successful runs take
   part, and a test whose pooled median is below its clock's resolution (JUnit: 1 ms)
   is too fast to judge. The pooled median ignores which run came from which
   configuration, so filtering on it leaves the rank test's null distribution intact
   (independent filtering, Bourgon et al. 2010) and the false discovery rate with it.
2. A difference at all. A k-sample rank test per test, joined with one per pair of
   configurations (services/measure/stats.py configuration_test), then Benjamini-Hochberg
   over the tests of the job (and the whole command) at ``cpu_sensitivity_fdr``: a suite
   of 200 tests run 5 times each would otherwise produce a few "sensitive" tests by
   chance alone.
3. A difference that matters. The slowest median at least ``cpu_sensitivity_ratio``
   times the fastest and ``cpu_sensitivity_min_s`` above it, with the fastest median
   itself resolvable (a ratio to 0.000 s is no ratio). Gates after BH only remove
   discoveries, so they cannot raise the false discovery rate.

A CPU quota's share of a slowdown is physics, not a finding (docs/reference/findings.md): a program that
keeps one CPU busy takes twice as long with cpus=0.5, and one that keeps two busy four
times. Against a configuration with a quota, the time to beat is therefore what the
quota alone explains: the fastest configuration's median stretched by the CPUs the
command kept busy there over the quota, plus one throttling pause (services/measure/
cgroups.py). The same holds for fewer cores (docs/reference/findings.md): a process pool that keeps two
CPUs busy on two cores takes twice as long pinned to one, so against a configuration
pinned to fewer CPUs than the command kept busy, the time to beat is the fastest median
stretched by that ratio. The ratio to that is the one the gates and the severity read.
A test's own CPU time is unknown, so its command's stands in for it.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass, field

from services.diagnose.context import RuleContext
from services.diagnose.findings import FindingDraft, Severity
from services.diagnose.findings import format_seconds as _s
from services.diagnose.metrics import ConfigMedian, ConfigsLoad, CpuSensitivityMetrics, PinnedShare, QuotaShare
from services.diagnose.neighbours import confounded
from services.measure.cgroups import THROTTLE_PAUSE_S
from services.measure.samples import JobSamples
from services.measure.stats import Summary, benjamini_hochberg, configuration_test, median_interval
from services.thresholds import Thresholds

METHOD = (
    "exact Kruskal-Wallis rank test (50,000 permutations beyond 21 runs) and pairwise rank tests (Holm), "
    "joined by Bonferroni; Benjamini-Hochberg over the tests"
)


@dataclass(frozen=True)
class Candidate:
    test_id: str | None
    summaries: dict[str, Summary]
    resolution_s: float
    p_value: float
    # configuration label -> the neighbour load of each run (None: not recorded)
    loads: dict[str, list[float] | None] | None = None
    # configuration label -> its CPU quota; and the CPUs the command kept busy there
    quotas: dict[str, float] = field(default_factory=dict)
    cpu_shares: dict[str, float | None] = field(default_factory=dict)
    # configuration label -> the CPUs it pins the command to
    pinned: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Slowdown:
    """One configuration against the fastest: ``expected_s`` is the median it would have
    if nothing but its quota slowed it (the fastest median when it has no quota)."""

    slow: str
    fast: str
    expected_s: float
    quota: float | None = None
    cpu_share: float | None = None
    # Pinned to fewer CPUs than the command kept busy in the fastest configuration.
    pinned: int | None = None

    def ratio(self, summaries: dict[str, Summary]) -> float:
        fast = summaries[self.fast].median
        return summaries[self.slow].median / fast if fast > 0 else math.inf

    def unexplained(self, summaries: dict[str, Summary]) -> float:
        return summaries[self.slow].median / self.expected_s if self.expected_s > 0 else math.inf


def slowdowns(candidate: Candidate) -> list[Slowdown]:
    """Every other configuration against the fastest, the least explained first."""
    summaries = candidate.summaries
    fast = min(summaries, key=lambda label: summaries[label].median)
    fast_median = summaries[fast].median
    share = candidate.cpu_shares.get(fast)
    found = []
    for label in summaries:
        if label == fast:
            continue
        quota = candidate.quotas.get(label)
        pinned = candidate.pinned.get(label)
        if share is None or (quota is None and pinned is None):
            found.append(Slowdown(label, fast, fast_median))
        elif quota is not None:
            expected = fast_median * max(1.0, share / quota) + THROTTLE_PAUSE_S
            found.append(Slowdown(label, fast, expected, quota, share))
        elif pinned is not None and share > pinned:
            # Parallel work on fewer cores takes longer by the cores it lost (docs/reference/findings.md: a
            # process pool computing on two cores is twice as slow on one, as it must be).
            found.append(Slowdown(label, fast, fast_median * share / pinned, None, share, pinned))
        else:
            found.append(Slowdown(label, fast, fast_median))
    return sorted(found, key=lambda slowdown: -slowdown.unexplained(summaries))


def check(context: RuleContext) -> list[FindingDraft]:
    return judge(context.samples, context.thresholds, seed=context.job.screen_seed or 0)


def candidates(samples: JobSamples, thresholds: Thresholds, seed: int = 0) -> dict[str, Candidate]:
    """Every series that can be judged, with its rank test's p-value (the BH family)."""
    family: dict[str, Candidate] = {}
    for test_id, per_config, resolution in samples.series():
        eligible = {label: values for label, values in per_config.items() if len(values) >= thresholds.min_repetitions}
        if len(eligible) < 2:
            continue
        if statistics.median([v for values in eligible.values() for v in values]) < resolution:
            continue  # too fast to judge
        # Seeded per test: ties broken the same way whenever this job is judged again.
        rng = random.Random(f"{seed}\x1f{test_id}")
        p_value = configuration_test(list(eligible.values()), rng)
        summaries = {label: median_interval(values) for label, values in eligible.items()}
        loads = {label: samples.load(test_id, label) for label in eligible}
        quotas = {label: samples.quotas[label] for label in eligible if label in samples.quotas}
        shares = {label: samples.cpu_share(label) for label in eligible}
        pinned = {label: samples.pinned[label] for label in eligible if label in samples.pinned}
        family[test_id or ""] = Candidate(test_id, summaries, resolution, p_value, loads, quotas, shares, pinned)
    return family


def judge(samples: JobSamples, thresholds: Thresholds, seed: int = 0) -> list[FindingDraft]:
    family = candidates(samples, thresholds, seed)
    p_values = family_p_values(family, samples)
    discoveries = benjamini_hochberg(p_values, thresholds.cpu_sensitivity_fdr)
    drafts = []
    for key, candidate in family.items():  # the command first, then tests in id order
        if key in discoveries:
            draft = _finding(candidate, thresholds, len(p_values))
            if draft:
                drafts.append(draft)
    return drafts


def family_p_values(family: dict[str, Candidate], samples: JobSamples) -> dict[str, float]:
    """The false discovery rate's family: every series judged, and every test a stopping
    rule cleared before it had the runs to be judged (``samples.cleared``, the focused
    screen's futility stop) with p = 1. Clearing tests early must not make a discovery
    easier among the rest: the family stays the size it would have had."""
    p_values = {key: candidate.p_value for key, candidate in family.items()}
    return {**{test_id: 1.0 for test_id in samples.cleared if test_id not in family}, **p_values}


def undecided(samples: JobSamples, thresholds: Thresholds, seed: int = 0) -> list[Candidate]:
    """Tests that look sensitive on their own (large enough, p under the rate) but are no
    discovery among all the tests judged: more runs would decide them."""
    family = candidates(samples, thresholds, seed)
    p_values = family_p_values(family, samples)
    discoveries = benjamini_hochberg(p_values, thresholds.cpu_sensitivity_fdr)
    return [
        candidate
        for key, candidate in family.items()
        if key not in discoveries
        and candidate.p_value <= thresholds.cpu_sensitivity_fdr
        and _finding(candidate, thresholds, len(p_values)) is not None
    ]


def _finding(candidate: Candidate, thresholds: Thresholds, family_size: int) -> FindingDraft | None:
    summaries = candidate.summaries
    if len(summaries) < 2:
        return None
    worst = slowdowns(candidate)[0]
    slow, fast = summaries[worst.slow], summaries[worst.fast]
    if fast.median < candidate.resolution_s:
        return None  # the fast side is below the clock's resolution: no ratio to state
    if slow.median - worst.expected_s < thresholds.cpu_sensitivity_min_s:
        return None
    ratio, unexplained = worst.ratio(summaries), worst.unexplained(summaries)
    if unexplained < thresholds.cpu_sensitivity_ratio:
        return None
    if unexplained >= thresholds.severity_high_ratio:
        severity = Severity.high
    elif unexplained >= thresholds.severity_medium_ratio:
        severity = Severity.medium
    else:
        severity = Severity.low
    loads = candidate.loads or {}
    neighbours = confounded(loads.get(worst.slow), loads.get(worst.fast))
    if neighbours:
        # The two configurations were timed beside different amounts of other work:
        # the ratio stands, but how much of it is the program's is unknown.
        severity = Severity.medium if severity == Severity.high else Severity.low
    subject = candidate.test_id or "The command"
    others = [
        f"{label}: {summaries[label].median / fast.median:.1f}x"
        for label in summaries
        if label not in (worst.slow, worst.fast)
    ]
    detail = (
        f"median {_s(slow.median)} [{_s(slow.ci_low)} .. {_s(slow.ci_high)}] with {worst.slow} "
        f"vs {_s(fast.median)} [{_s(fast.ci_low)} .. {_s(fast.ci_high)}] with {worst.fast}: "
        f"{ratio:.1f}x, {_s(slow.median - fast.median)} slower "
        f"(n={slow.n} and n={fast.n}; intervals at {slow.confidence:.0%} and {fast.confidence:.0%}); "
        f"rank test p={candidate.p_value:.2g}, a discovery at a false discovery rate of "
        f"{thresholds.cpu_sensitivity_fdr:g} over the {family_size} tests judged"
        + (f"; others vs {worst.fast}: {', '.join(others)}" if others else "")
        + (f". {neighbours.describe(worst.slow, worst.fast)}" if neighbours else "")
        + (f". {_quota_share(worst, ratio, unexplained)}" if worst.quota is not None else "")
        + (f". {_pinned_share(worst, ratio, unexplained)}" if worst.pinned is not None else "")
    )
    return FindingDraft(
        kind="cpu_sensitivity",
        severity=severity,
        title=f"{subject} is {ratio:.1f}x slower with {worst.slow} than with {worst.fast}"
        + (f", {unexplained:.1f}x more than its quota explains" if worst.quota is not None else "")
        + (f", {unexplained:.1f}x more than its fewer CPUs explain" if worst.pinned is not None else ""),
        detail=detail,
        config_label=worst.slow,
        test_id=candidate.test_id,
        metrics=CpuSensitivityMetrics(
            ratio=ratio,
            slower_by_s=slow.median - fast.median,
            slow=_median(worst.slow, slow),
            fast=_median(worst.fast, fast),
            medians={label: summary.median for label, summary in summaries.items()},
            p_value=candidate.p_value,
            fdr=thresholds.cpu_sensitivity_fdr,
            family_size=family_size,
            method=METHOD,
            neighbour_load=ConfigsLoad(slow=neighbours.first, fast=neighbours.second) if neighbours else None,
            quota=QuotaShare(cpus=worst.quota, cpu_share=worst.cpu_share, expected_s=worst.expected_s)
            if worst.quota is not None
            else None,
            pinned=PinnedShare(cpus=worst.pinned, cpu_share=worst.cpu_share, expected_s=worst.expected_s)
            if worst.pinned is not None
            else None,
        ),
    )


def _median(label: str, summary: Summary) -> ConfigMedian:
    return ConfigMedian(
        config=label,
        median=summary.median,
        ci_low=summary.ci_low,
        ci_high=summary.ci_high,
        n=summary.n,
        confidence=summary.confidence,
    )


def _pinned_share(slowdown: Slowdown, ratio: float, unexplained: float) -> str:
    return (
        f"The command kept {slowdown.cpu_share:.2f} CPUs busy with {slowdown.fast}; on the {slowdown.pinned} CPU(s) "
        f"of {slowdown.slow} it would take {_s(slowdown.expected_s)}: fewer CPUs explain "
        f"{ratio / unexplained:.1f}x of the {ratio:.1f}x, {unexplained:.1f}x is left"
    )


def _quota_share(slowdown: Slowdown, ratio: float, unexplained: float) -> str:
    return (
        f"The command kept {slowdown.cpu_share:.2f} CPUs busy with {slowdown.fast}; rationed to "
        f"{slowdown.quota:g} CPUs, with one throttling pause, it would take {_s(slowdown.expected_s)}: "
        f"the quota explains {ratio / unexplained:.1f}x of the {ratio:.1f}x, {unexplained:.1f}x is left"
    )
