"""A test's fresh runs against its stored history: DIFFERENT, SAME or UNDECIDED after
each look, valid however often it looks.

The reference is the test's stored runs in one configuration on one node class (its
history, ``h`` runs); fresh runs arrive one look at a time. Under "nothing changed" the
fresh and the stored runs are exchangeable, so the Mann-Whitney count U (pairs in which
the fresh run is the slower) has an exact distribution that depends only on ``h`` and
the number of fresh runs ``k`` (Mann & Whitney 1947), whatever the shape of the latency
distribution: skewed, rounded to the millisecond or bimodal. k fresh runs all slower
than h stored ones have p = 1 / C(h + k, k): 2 against 20 give 0.0043.

Looking after every run would spend the level again at each look. The level is spent
across the looks instead, by fixed weights that sum to at most 1 (Bonferroni alpha
spending, the simplest group-sequential design: Jennison & Turnbull, *Group Sequential
Methods with Applications to Clinical Trials*, 2000, section 7.2): the sequential
p-value ``min_j p_j / w_j`` over the looks so far is a valid p-value at any stopping
time, by the union bound. Across a suite's tests the caller holds these p-values to its
false discovery rate (services/measure/stats.py benjamini_hochberg).

SAME needs more than "not shown slower": the Hodges-Lehmann shift of the log-durations
has an exact distribution-free interval from the same distribution (Lehmann,
*Nonparametrics*, 1975, section 2.6: the order statistics of the k*h pairwise
differences), spent across looks the same way; a test is SAME once that interval lies
inside the change ratio either way.

The gate's one run of the whole suite is a screen, not a look (``goes_on``): a test
whose run sits inside its history stops there, as "no evidence of a move"; only the
others are judged, on the runs after the screen, so that the screen's selection does
not spend the judgement's level. Stopping a test at the screen never raises the
false-finding rate, it only costs power, which tests/bench/bench_gate.py measures.
"""

from __future__ import annotations

import functools
import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

DIFFERENT, SAME, UNDECIDED = "different", "same", "undecided"


@dataclass(frozen=True)
class SequentialRule:
    """How a test is judged against its history; one rule for every test of a job."""

    looks: int = 5  # fresh runs at most
    alpha: float = 0.01  # DIFFERENT: the sequential p-value's level, per test and side
    same_alpha: float = 0.10  # SAME: the interval's level (a wrong SAME is a miss, not an alarm)
    change_ratio: float = 1.2  # a smaller move is no change worth a verdict
    # The screen: a run this far inside the history stops there. Asymmetric: a gate is
    # there for slowdowns; a speed-up goes on only when its run is extreme.
    continue_p: float = 0.1
    continue_faster_p: float = 0.05
    min_s: float = 0.010  # below this change in seconds: SAME (a scheduler tick)

    def first_look(self, stored: int) -> int:
        """The first look at which ``k`` runs all slower than ``stored`` can reach the
        level with half of it: 1 / C(stored + k, k) <= alpha / 2. Looks before it
        could never decide, so no level is spent on them."""
        for look in range(1, self.looks + 1):
            if 1 / math.comb(stored + look, look) <= self.alpha / 2:
                return look
        return self.looks

    def weight(self, look: int, stored: int) -> float:
        """The share of the level spent at ``look`` (1-based): none before the first look
        that can decide, half at it, then the rest in equal parts, so that a large effect
        is called early. It depends on the history's size only, never on the fresh runs."""
        first = self.first_look(stored)
        if look < first:
            return 0.0
        if look == first:
            return 1.0 if first == self.looks else 0.5
        return 0.5 / (self.looks - first)


@dataclass(frozen=True)
class Judgement:
    verdict: str  # DIFFERENT, SAME or UNDECIDED
    slower: bool  # with DIFFERENT: which way
    fresh: int
    stored: int
    ratio: float | None  # fresh over stored: exp of the Hodges-Lehmann shift
    ratio_low: float | None  # the interval at this look's spent level (None: unbounded)
    ratio_high: float | None
    p_slower: float  # sequential p-values, valid at any stopping time
    p_faster: float


@functools.lru_cache(maxsize=4096)
def _u_counts(fresh: int, stored: int) -> tuple[int, ...]:
    """How many orderings of ``fresh`` + ``stored`` distinct values give each U."""
    if fresh == 0 or stored == 0:
        return (1,)
    # The largest value is fresh (it beats every stored one) or stored (it beats none).
    with_fresh_top = _u_counts(fresh - 1, stored)
    with_stored_top = _u_counts(fresh, stored - 1)
    counts = [0] * (fresh * stored + 1)
    for u, ways in enumerate(with_fresh_top):
        counts[u + stored] += ways
    for u, ways in enumerate(with_stored_top):
        counts[u] += ways
    return tuple(counts)


@functools.lru_cache(maxsize=4096)
def _u_cdf(fresh: int, stored: int) -> tuple[float, ...]:
    """P(U <= u) for u = 0 .. fresh * stored."""
    counts = _u_counts(fresh, stored)
    total = sum(counts)
    running, cdf = 0, []
    for ways in counts:
        running += ways
        cdf.append(running / total)
    return tuple(cdf)


def u_statistic(fresh: Sequence[float], stored: Sequence[float], rng: random.Random) -> int:
    """Pairs in which the fresh run is the slower; ties (JUnit's millisecond) broken at
    random by a seeded generator, which keeps U's null distribution exact."""
    tagged = sorted([(v, rng.random(), 1) for v in fresh] + [(v, rng.random(), 0) for v in stored])
    u, stored_below = 0, 0
    for _, _, is_fresh in tagged:
        if is_fresh:
            u += stored_below
        else:
            stored_below += 1
    return u


def _p_values(u: int, fresh: int, stored: int) -> tuple[float, float]:
    """One-sided exact p-values: (fresh slower, fresh faster)."""
    cdf = _u_cdf(fresh, stored)
    p_faster = cdf[u]
    p_slower = 1.0 - cdf[u - 1] if u > 0 else 1.0
    return min(1.0, p_slower), min(1.0, p_faster)


def shift_interval(
    fresh: Sequence[float], stored: Sequence[float], alpha: float
) -> tuple[float, float | None, float | None]:
    """The Hodges-Lehmann ratio fresh / stored and its two-sided exact interval at level
    1 - alpha; a bound is None where the runs are too few for that level."""
    logs_f = [math.log(max(v, 1e-6)) for v in fresh]
    logs_s = [math.log(max(v, 1e-6)) for v in stored]
    differences = sorted(f - s for f in logs_f for s in logs_s)
    ratio = math.exp(statistics.median(differences))
    cdf = _u_cdf(len(fresh), len(stored))
    # The largest c with P(U <= c - 1) <= alpha / 2: the c-th smallest difference is the
    # lower bound, the c-th largest the upper (Lehmann 1975, section 2.6).
    c = 0
    while alpha > 0 and c < len(cdf) and cdf[c] <= alpha / 2:
        c += 1
    if c == 0:
        return ratio, None, None
    return ratio, math.exp(differences[c - 1]), math.exp(differences[-c])


def judge(stored: Sequence[float], fresh: Sequence[float], rule: SequentialRule, seed: int = 0) -> Judgement:
    """The verdict after ``len(fresh)`` looks, the fresh runs in the order they ran (the
    runs after the screen: ``goes_on``)."""
    if not stored or not fresh:
        raise ValueError("no samples")
    if len(fresh) > rule.looks:
        raise ValueError(f"{len(fresh)} fresh runs: the rule looks at most {rule.looks} times")
    rng = random.Random(seed)
    per_look = [
        _p_values(u_statistic(fresh[:look], stored, rng), look, len(stored)) for look in range(1, len(fresh) + 1)
    ]
    weights = [rule.weight(look, len(stored)) for look in range(1, len(fresh) + 1)]
    p_slower = min([1.0] + [p / w for (p, _), w in zip(per_look, weights, strict=True) if w > 0])
    p_faster = min([1.0] + [p / w for (_, p), w in zip(per_look, weights, strict=True) if w > 0])
    return _verdict(fresh, stored, p_slower, p_faster, rule, rule.same_alpha * weights[-1])


def _verdict(
    fresh: Sequence[float],
    stored: Sequence[float],
    p_slower: float,
    p_faster: float,
    rule: SequentialRule,
    alpha: float,
) -> Judgement:
    """DIFFERENT, SAME or UNDECIDED from the sequential p-values and the shift's interval
    at the level ``alpha`` this look spends (``judge``, ``compare_arms``)."""
    ratio, low, high = shift_interval(fresh, stored, alpha)

    def made(verdict: str, slower: bool = False) -> Judgement:
        return Judgement(
            verdict, slower, len(fresh), len(stored), ratio, low, high, min(1.0, p_slower), min(1.0, p_faster)
        )

    moved_s = statistics.median(fresh) - statistics.median(stored)
    if abs(moved_s) < rule.min_s:
        return made(SAME)
    if p_slower <= rule.alpha and ratio >= rule.change_ratio:
        return made(DIFFERENT, slower=True)
    if p_faster <= rule.alpha and ratio <= 1 / rule.change_ratio:
        return made(DIFFERENT, slower=False)
    if low is not None and high is not None and low >= 1 / rule.change_ratio and high <= rule.change_ratio:
        return made(SAME)
    return made(UNDECIDED)


def goes_on(stored: Sequence[float], screened: float, rule: SequentialRule, seed: int = 0) -> bool:
    """Whether a test's one run in the gate lies far enough out of its history to be
    judged on more runs (its one-sided rank p-value at most ``continue_p`` slower, or
    ``continue_faster_p`` faster). A run within ``min_s`` of the history's median does
    not go on, however extreme its rank: ``judge`` calls such a move SAME at every look,
    so its runs would be spent on a verdict known in advance (a 5 ms test's slowest run
    in twenty, a scheduler tick slower)."""
    if not stored:
        raise ValueError("no history")
    if abs(screened - statistics.median(stored)) < rule.min_s:
        return False
    slower, faster = _p_values(u_statistic([screened], stored, random.Random(seed)), 1, len(stored))
    return slower <= rule.continue_p or faster <= rule.continue_faster_p


def compare_arms(treated: Sequence[float], control: Sequence[float], rule: SequentialRule, seed: int = 0) -> Judgement:
    """Two arms run in pairs, interleaved (services/measure/confirm.py): after each pair,
    DIFFERENT, SAME or UNDECIDED for ``treated`` against ``control``, valid however often
    it looks, at most ``rule.looks`` pairs.

    ``judge`` holds a fixed history; here both arms grow by one run a look. Each look's
    exact rank p-value is still valid on its own (the runs of both arms are exchangeable
    when the treatment does nothing: interleaved, their order swapped each pair), so the
    level is spent across looks by the same weights, by the union bound. A pair of arms of
    ``j`` runs each can reach p = 1 / C(2j, j): no level is spent before that can decide."""
    if len(treated) != len(control) or not treated:
        raise ValueError("the arms are compared in pairs")
    looks = len(treated)
    if looks > rule.looks:
        raise ValueError(f"{looks} pairs: the rule looks at most {rule.looks} times")
    first = next((j for j in range(1, rule.looks + 1) if 1 / math.comb(2 * j, j) <= rule.alpha / 2), rule.looks)

    def weight(look: int) -> float:
        if look < first:
            return 0.0
        if look == first:
            return 1.0 if first == rule.looks else 0.5
        return 0.5 / (rule.looks - first)

    rng = random.Random(seed)
    per_look = [_p_values(u_statistic(treated[:look], control[:look], rng), look, look) for look in range(1, looks + 1)]
    weights = [weight(look) for look in range(1, looks + 1)]
    p_slower = min([1.0] + [p / w for (p, _), w in zip(per_look, weights, strict=True) if w > 0])
    p_faster = min([1.0] + [p / w for (_, p), w in zip(per_look, weights, strict=True) if w > 0])
    return _verdict(treated, control, p_slower, p_faster, rule, rule.same_alpha * weights[-1])
