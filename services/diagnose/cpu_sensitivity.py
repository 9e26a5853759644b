"""cpu_sensitivity: latency that depends on the CPU configuration (DESIGN.md section 5).

Three gates, each for its own reason:

1. Enough to judge. Only configurations with ``min_repetitions`` successful runs take
   part, and a test whose pooled median is below its clock's resolution (JUnit: 1 ms)
   is too fast to judge. The pooled median ignores which run came from which
   configuration, so filtering on it leaves the rank test's null distribution intact
   (independent filtering, Bourgon et al. 2010) and the false discovery rate with it.
2. A difference at all. A k-sample rank test per test (services/measure/stats.py),
   then Benjamini-Hochberg over the tests of the job (and the whole command) at
   ``cpu_sensitivity_fdr``: a suite of 200 tests run 5 times each would otherwise
   produce a few "sensitive" tests by chance alone.
3. A difference that matters. The slowest median at least ``cpu_sensitivity_ratio``
   times the fastest and ``cpu_sensitivity_min_s`` above it, with the fastest median
   itself resolvable (a ratio to 0.000 s is no ratio). Gates after BH only remove
   discoveries, so they cannot raise the false discovery rate.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass

from services.diagnose.context import RuleContext
from services.diagnose.findings import FindingDraft, Severity
from services.diagnose.findings import format_seconds as _s
from services.diagnose.neighbours import confounded
from services.measure.samples import JobSamples
from services.measure.stats import Summary, benjamini_hochberg, compare, median_interval, rank_test
from services.thresholds import Thresholds

METHOD = "exact Kruskal-Wallis rank test (50,000 permutations beyond 21 runs), Benjamini-Hochberg"


@dataclass(frozen=True)
class Candidate:
    test_id: str | None
    summaries: dict[str, Summary]
    resolution_s: float
    p_value: float
    # configuration label -> the neighbour load of each run (None: not recorded)
    loads: dict[str, list[float] | None] | None = None


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
        p_value = rank_test(list(eligible.values()), rng)
        summaries = {label: median_interval(values) for label, values in eligible.items()}
        loads = {label: samples.load(test_id, label) for label in eligible}
        family[test_id or ""] = Candidate(test_id, summaries, resolution, p_value, loads)
    return family


def judge(samples: JobSamples, thresholds: Thresholds, seed: int = 0) -> list[FindingDraft]:
    family = candidates(samples, thresholds, seed)
    discoveries = benjamini_hochberg({key: c.p_value for key, c in family.items()}, thresholds.cpu_sensitivity_fdr)
    drafts = []
    for key, candidate in family.items():  # the command first, then tests in id order
        if key in discoveries:
            draft = _finding(candidate, thresholds, len(family))
            if draft:
                drafts.append(draft)
    return drafts


def undecided(samples: JobSamples, thresholds: Thresholds, seed: int = 0) -> list[Candidate]:
    """Tests that look sensitive on their own (large enough, p under the rate) but are no
    discovery among all the tests judged: more runs would decide them."""
    family = candidates(samples, thresholds, seed)
    discoveries = benjamini_hochberg({key: c.p_value for key, c in family.items()}, thresholds.cpu_sensitivity_fdr)
    return [
        candidate
        for key, candidate in family.items()
        if key not in discoveries
        and candidate.p_value <= thresholds.cpu_sensitivity_fdr
        and _finding(candidate, thresholds, len(family)) is not None
    ]


def _finding(candidate: Candidate, thresholds: Thresholds, family_size: int) -> FindingDraft | None:
    summaries = candidate.summaries
    comparison = compare(summaries)
    if comparison is None:
        return None
    slow, fast = summaries[comparison.slow], summaries[comparison.fast]
    if fast.median < candidate.resolution_s:
        return None  # the fast side is below the clock's resolution: no ratio to state
    if slow.median - fast.median < thresholds.cpu_sensitivity_min_s:
        return None
    ratio = comparison.ratio
    if ratio < thresholds.cpu_sensitivity_ratio:
        return None
    if ratio >= thresholds.severity_high_ratio:
        severity = Severity.high
    elif ratio >= thresholds.severity_medium_ratio:
        severity = Severity.medium
    else:
        severity = Severity.low
    loads = candidate.loads or {}
    neighbours = confounded(loads.get(comparison.slow), loads.get(comparison.fast))
    if neighbours:
        # The two configurations were timed beside different amounts of other work:
        # the ratio stands, but how much of it is the program's is unknown.
        severity = Severity.medium if severity == Severity.high else Severity.low
    subject = candidate.test_id or "The command"
    others = [
        f"{label}: {summaries[label].median / fast.median:.1f}x"
        for label in summaries
        if label not in (comparison.slow, comparison.fast)
    ]
    detail = (
        f"median {_s(slow.median)} [{_s(slow.ci_low)} .. {_s(slow.ci_high)}] with {comparison.slow} "
        f"vs {_s(fast.median)} [{_s(fast.ci_low)} .. {_s(fast.ci_high)}] with {comparison.fast}: "
        f"{ratio:.1f}x, {_s(slow.median - fast.median)} slower "
        f"(n={slow.n} and n={fast.n}; intervals at {slow.confidence:.0%} and {fast.confidence:.0%}); "
        f"rank test p={candidate.p_value:.2g}, a discovery at a false discovery rate of "
        f"{thresholds.cpu_sensitivity_fdr:g} over the {family_size} tests judged"
        + (f"; others vs {comparison.fast}: {', '.join(others)}" if others else "")
        + (f". {neighbours.describe(comparison.slow, comparison.fast)}" if neighbours else "")
    )
    return FindingDraft(
        kind="cpu_sensitivity",
        severity=severity,
        title=f"{subject} is {ratio:.1f}x slower with {comparison.slow} than with {comparison.fast}",
        detail=detail,
        config_label=comparison.slow,
        test_id=candidate.test_id,
        metrics={
            "ratio": ratio,
            "slower_by_s": slow.median - fast.median,
            "slow": {"config": comparison.slow, **slow.as_dict()},
            "fast": {"config": comparison.fast, **fast.as_dict()},
            "medians": {label: summary.median for label, summary in summaries.items()},
            "p_value": candidate.p_value,
            "fdr": thresholds.cpu_sensitivity_fdr,
            "family_size": family_size,
            "method": METHOD,
            **({"neighbour_load": {"slow": neighbours.first, "fast": neighbours.second}} if neighbours else {}),
        },
    )
