"""Medians with distribution-free confidence intervals, and the stopping rule.

Latency samples are skewed and few, so nothing here assumes normality: the interval
for the median is the exact order-statistic interval from the binomial distribution.
"""

from __future__ import annotations

import bisect
import functools
import math
import random
import statistics
from collections import defaultdict
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


# --- Is a test's latency different between configurations at all? -----------------
#
# The Kruskal-Wallis test, exact: the statistic is sum(R_i^2 / n_i) over the
# configurations' rank sums R_i (H up to constants), which grows with any shift of any
# configuration, so choosing the slowest and fastest pair afterwards costs nothing.
# Ranks make it indifferent to skew and to a slow mode. Ties (JUnit rounds to 1 ms)
# are broken at random by a seeded generator: the ranks are then a uniform
# permutation under the null, whose distribution depends only on the group sizes and
# is computed once per sizes, exactly where that is cheap, else from a seeded sample.

EXACT_MAX_RUNS = 21  # three configurations of 7 runs: exact in under a second
EXACT_MAX_CONFIGS = 3
PERMUTATIONS = 50_000  # beyond that, a seeded Monte Carlo null: p resolution 2e-5


def _statistic(sums: list[int] | list[float], sizes: tuple[int, ...] | list[int]) -> float:
    return round(sum(s * s / n for s, n in zip(sums, sizes, strict=True)), 6)


def rank_sums(groups: list[list[float]], rng: random.Random) -> list[int]:
    """Each group's rank sum (1 = fastest), ties broken at random."""
    tagged = sorted((value, rng.random(), g) for g, values in enumerate(groups) for value in values)
    sums = [0] * len(groups)
    for rank, (_, _, g) in enumerate(tagged, start=1):
        sums[g] += rank
    return sums


def rank_test(groups: list[list[float]], rng: random.Random) -> float:
    """p-value that the configurations' latencies are one distribution (any difference)."""
    groups = [g for g in groups if g]
    if len(groups) < 2:
        return 1.0
    observed = _statistic(rank_sums(groups, rng), [len(g) for g in groups])
    return _null(tuple(sorted(len(g) for g in groups))).p_value(observed)


# The share of the level given to the pairs: little, since a pair that only they find gets
# more runs anyway (services/measure/screen.py undecided), while every finding pays the rest.
PAIRWISE_WEIGHT = 0.2


def configuration_test(groups: list[list[float]], rng: random.Random) -> float:
    """p-value that the configurations' latencies are one distribution, with power where
    only one pair differs.

    Kruskal-Wallis sees a shift of any configuration, but a third configuration spread
    over both of the others hides a pair that is fully apart (docs/explanations/statistics.md: a websocket test
    pinned 0.055 s against 0.014 s on two cores, every run apart, while cpus=0.5 ran from
    0.012 to 0.074 s, gave p=0.06). So each pair is ranked alone too (Bonferroni over the
    pairs), and the two are joined by a weighted Bonferroni: the omnibus at
    1 - PAIRWISE_WEIGHT of the level, the pairs at the rest. A valid p-value."""
    groups = [g for g in groups if g]
    omnibus = rank_test(groups, rng)
    if len(groups) < 3:
        return omnibus  # one pair: the two tests are the same test
    pairs = [(a, b) for i, a in enumerate(groups) for b in groups[i + 1 :]]
    pairwise = min(rank_test([a, b], rng) for a, b in pairs) * len(pairs)
    return min(1.0, omnibus / (1 - PAIRWISE_WEIGHT), pairwise / PAIRWISE_WEIGHT)


@dataclass(frozen=True)
class _NullDistribution:
    values: tuple[float, ...]  # of the statistic, sorted ascending
    weights: tuple[float, ...]  # weights[i] = P(T >= values[i]) under the null
    exact: bool

    def p_value(self, observed: float) -> float:
        index = bisect.bisect_left(self.values, observed - 1e-6)
        if index >= len(self.values):
            return self.weights[-1] if not self.exact else 0.0
        return self.weights[index]


@functools.lru_cache(maxsize=64)
def _null(sizes: tuple[int, ...]) -> _NullDistribution:
    if len(sizes) <= EXACT_MAX_CONFIGS and sum(sizes) <= EXACT_MAX_RUNS:
        counts = _exact_null(sizes)
        exact = True
    else:
        counts = _sampled_null(sizes)
        exact = False
    total = sum(counts.values())
    values = sorted(counts)
    tail, weights = 0, []
    for value in reversed(values):
        tail += counts[value]
        weights.append(tail / total)
    weights.reverse()
    if not exact:
        # Phipson & Smyth: a sampled permutation p-value is never 0
        weights = [(w * total + 1) / (total + 1) for w in weights] + [1 / (total + 1)]
    return _NullDistribution(tuple(values), tuple(weights), exact)


def _exact_null(sizes: tuple[int, ...]) -> dict[float, int]:
    """Number of rank assignments per value of the statistic, by dynamic programming.

    The state is the count and rank sum of every group but the last (implied). States are
    kept per counts, their rank sums packed into one integer in base ``radix`` (above any
    rank sum, so no digit carries into the next): adding a rank to a group is one integer
    addition instead of two tuples rebuilt, which makes the larger exact nulls several
    times cheaper to build, with the same counts (tests/unit/services/measure/test_rank_test.py)."""
    k, total_runs = len(sizes), sum(sizes)
    rank_total = total_runs * (total_runs + 1) // 2
    radix = rank_total + 1
    # The weight of each group's rank sum in the packed key: the first group's most significant.
    weights = [radix ** (k - 2 - g) for g in range(k - 1)]
    states: dict[tuple[int, ...], dict[int, int]] = {tuple([0] * (k - 1)): {0: 1}}
    for rank in range(1, total_runs + 1):
        following: dict[tuple[int, ...], dict[int, int]] = defaultdict(dict)
        for counts, packed in states.items():
            if rank - 1 - sum(counts) < sizes[-1]:
                kept = following[counts]
                for key, ways in packed.items():
                    kept[key] = kept.get(key, 0) + ways
            for g in range(k - 1):
                if counts[g] < sizes[g]:
                    grown = following[(*counts[:g], counts[g] + 1, *counts[g + 1 :])]
                    step = rank * weights[g]
                    for key, ways in packed.items():
                        grown[key + step] = grown.get(key + step, 0) + ways
        states = following
    result: dict[float, int] = defaultdict(int)
    for final in states.values():
        for key, ways in final.items():
            sums = [key // weight % radix for weight in weights]
            result[_statistic([*sums, rank_total - sum(sums)], sizes)] += ways
    return result


def _sampled_null(sizes: tuple[int, ...]) -> dict[float, int]:
    rng = random.Random(0x1A6)  # fixed: the same job always gets the same p-values
    labels = [g for g, n in enumerate(sizes) for _ in range(n)]
    result: dict[float, int] = defaultdict(int)
    for _ in range(PERMUTATIONS):
        rng.shuffle(labels)
        sums = [0] * len(sizes)
        for rank, g in enumerate(labels, start=1):
            sums[g] += rank
        result[_statistic(sums, sizes)] += 1
    return result


def benjamini_hochberg(p_values: dict[str, float], q: float) -> set[str]:
    """The hypotheses rejected at false discovery rate q (Benjamini & Hochberg 1995).

    The tests of one suite share a machine, so their p-values are positively dependent
    at worst (a busy neighbour slows them all), under which BH still holds (Benjamini &
    Yekutieli 2001, PRDS)."""
    ranked = sorted(p_values.items(), key=lambda item: item[1])
    m = len(ranked)
    cutoff = 0
    for i, (_, p) in enumerate(ranked, start=1):
        if p <= q * i / m:
            cutoff = i
    return {key for key, _ in ranked[:cutoff]}


# --- Did a change make it slower? A pull request's head against its base ------------

BOOTSTRAP_RESAMPLES = 2000


def ratio_interval(
    base: list[float], head: list[float], seed: int = 0, confidence: float = CONFIDENCE
) -> tuple[float, float, float] | None:
    """head median / base median, and its percentile bootstrap interval.

    Each side is resampled on its own (the runs were interleaved, not paired), by a
    seeded generator so that one job always reports the same interval. None when no
    ratio can be stated: a median of 0 on either side (a test below the clock's
    resolution, which pytest's JUnit XML gives in milliseconds), or an interval with no
    upper end (resamples whose base median is 0). Every number returned is finite, so
    it can reach JSON and the database (tests/api/test_pull_requests.py, a 0 ms test).
    """
    if not base or not head:
        raise ValueError("no samples")
    if statistics.median(base) <= 0 or statistics.median(head) <= 0:
        return None
    rng = random.Random(seed)
    estimates = []
    for _ in range(BOOTSTRAP_RESAMPLES):
        b = statistics.median(rng.choices(base, k=len(base)))
        h = statistics.median(rng.choices(head, k=len(head)))
        estimates.append(h / b if b > 0 else math.inf)
    estimates.sort()
    tail = (1 - confidence) / 2
    low = estimates[int(tail * (len(estimates) - 1))]
    high = estimates[math.ceil((1 - tail) * (len(estimates) - 1))]
    if not math.isfinite(high):
        return None
    return statistics.median(head) / statistics.median(base), low, high
