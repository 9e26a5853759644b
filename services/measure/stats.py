"""Medians with distribution-free confidence intervals, and the stopping rule.

Latency samples are skewed and few, so nothing here assumes normality: the interval
for the median is the exact order-statistic interval from the binomial distribution.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    ci_low: float
    ci_high: float
    confidence: float  # what the interval really achieves; below CONFIDENCE for tiny n

    def as_dict(self) -> dict[str, float]:
        return {
            "median": self.median,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "n": self.n,
            "confidence": self.confidence,
        }


def _binom_cdf(k: int, n: int) -> float:
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


def median_interval(samples: list[float], confidence: float = CONFIDENCE) -> Summary:
    """Median and the narrowest symmetric order-statistic interval reaching ``confidence``.

    For n samples the interval [x(j), x(n+1-j)] covers the median with probability
    1 - 2 * P(Binomial(n, 1/2) <= j - 1). With too few samples for the confidence asked,
    the widest interval (min, max) is returned with the confidence it really has.
    """
    if not samples:
        raise ValueError("no samples")
    data = sorted(samples)
    n = len(data)
    best_j = 1
    for j in range(1, n // 2 + 1):
        if 1 - 2 * _binom_cdf(j - 1, n) >= confidence:
            best_j = j
        else:
            break
    achieved = 1 - 2 * _binom_cdf(best_j - 1, n) if n > 1 else 0.0
    return Summary(n, statistics.median(data), data[best_j - 1], data[n - best_j], achieved)


@dataclass(frozen=True)
class Comparison:
    slow: str
    fast: str
    ratio: float  # slow median / fast median
    disjoint: bool  # the two intervals do not overlap

    def is_sensitive(self, min_ratio: float) -> bool:
        return self.disjoint and self.ratio >= min_ratio


def compare(summaries: dict[str, Summary]) -> Comparison | None:
    """The slowest configuration against the fastest, by median."""
    if len(summaries) < 2:
        return None
    slow = max(summaries, key=lambda label: summaries[label].median)
    fast = min(summaries, key=lambda label: summaries[label].median)
    s, f = summaries[slow], summaries[fast]
    ratio = s.median / f.median if f.median > 0 else math.inf
    return Comparison(slow, fast, ratio, disjoint=s.ci_low > f.ci_high)


def pair_settled(a: Summary, b: Summary, min_ratio: float) -> bool:
    """True once more runs cannot change the verdict between a and b.

    Either the intervals are apart by at least ``min_ratio`` (sensitive whatever the
    true medians within them), or even their extremes are closer than that (not
    sensitive).
    """
    slow, fast = (a, b) if a.median >= b.median else (b, a)
    if fast.ci_high <= 0:
        return False
    clearly_apart = slow.ci_low >= min_ratio * fast.ci_high
    clearly_close = slow.ci_high < min_ratio * fast.ci_low
    return clearly_apart or clearly_close
