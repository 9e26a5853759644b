"""The k-sample rank test and Benjamini-Hochberg, on numbers with known answers."""

from __future__ import annotations

import math
import random

import pytest

from services.measure import stats
from services.measure.stats import benjamini_hochberg, configuration_test, rank_test


def test_two_groups_fully_apart_get_the_exact_mann_whitney_p_value():
    # two-sided exact Mann-Whitney for 5 vs 5 with no overlap: 2 / C(10, 5)
    p = rank_test([[1.0, 2, 3, 4, 5], [6.0, 7, 8, 9, 10]], random.Random(0))
    assert p == pytest.approx(2 / math.comb(10, 5))


def test_three_groups_in_order_get_the_exact_permutation_p_value():
    # only the 3! orderings of the three blocks are this extreme among 15!/(5!5!5!) labelings
    p = rank_test([[1.0, 2, 3, 4, 5], [6.0, 7, 8, 9, 10], [11.0, 12, 13, 14, 15]], random.Random(0))
    assert p == pytest.approx(6 / (math.factorial(15) / math.factorial(5) ** 3))


def test_identical_groups_are_not_different():
    assert rank_test([[1.0, 2, 3, 4, 5]] * 3, random.Random(0)) > 0.9


@pytest.mark.parametrize("test", [rank_test, configuration_test])
def test_p_values_hold_their_level_under_the_null_even_for_bimodal_latency(test):
    rng = random.Random(11)
    trials, hits = 3000, 0
    for _ in range(trials):
        groups = [[rng.choice((0.01, 0.2)) * rng.uniform(0.9, 1.1) for _ in range(5)] for _ in range(3)]
        hits += test(groups, rng) <= 0.05
    assert hits / trials <= 0.05 + 0.01


def test_ties_are_broken_reproducibly_by_the_seed():
    groups = [[0.001] * 5, [0.001, 0.001, 0.002, 0.002, 0.002], [0.002] * 5]
    assert rank_test(groups, random.Random("job\x1ftest")) == rank_test(groups, random.Random("job\x1ftest"))


def test_sampled_null_agrees_with_the_exact_one():
    sizes = (5, 5, 5)
    exact = stats._null(sizes)
    sampled = stats._NullDistribution(*_as_distribution(stats._sampled_null(sizes)), exact=False)
    for observed in (exact.values[len(exact.values) // 2], exact.values[-40]):
        assert sampled.p_value(observed) == pytest.approx(exact.p_value(observed), abs=0.01)


def _as_distribution(counts):
    total = sum(counts.values())
    values = sorted(counts)
    tail, weights = 0, []
    for value in reversed(values):
        tail += counts[value]
        weights.append(tail / total)
    return tuple(values), tuple(reversed(weights))


def test_large_jobs_use_the_seeded_sample_and_still_find_a_clear_shift():
    groups = [[1.0 + i * 0.01 for i in range(12)], [1.0 + i * 0.01 for i in range(12)], [3.0] * 12]
    assert rank_test(groups, random.Random(0)) < 1e-3


def test_benjamini_hochberg_step_up():
    # the classic example: with q = 0.05 over 5 hypotheses the cut-offs are 0.01 ... 0.05
    p = {"a": 0.001, "b": 0.008, "c": 0.039, "d": 0.041, "e": 0.6}
    assert benjamini_hochberg(p, 0.05) == {"a", "b"}
    # step-up: a later p under its cut-off rescues the earlier ones
    assert benjamini_hochberg({"a": 0.02, "b": 0.02}, 0.05) == {"a", "b"}
    assert benjamini_hochberg({}, 0.05) == set()


# docs/explanations/statistics.md's websocket test: pinned fully above two cores, the quota's runs over both.
PINNED, QUOTA, TWO_CORES = [0.055, 0.054, 0.056, 0.055, 0.057], [0.012, 0.013, 0.070, 0.072, 0.074], [0.014] * 5


def test_a_pair_fully_apart_is_seen_where_a_third_configuration_spans_both():
    omnibus = rank_test([PINNED, QUOTA, TWO_CORES], random.Random(0))
    joined = configuration_test([PINNED, QUOTA, TWO_CORES], random.Random(0))
    assert omnibus > 0.1  # Kruskal-Wallis alone: no difference at 5 % at all
    # the three pairs' Bonferroni at a fifth of the level: 3 x 2 / C(10, 5) / 0.2
    assert joined == pytest.approx(3 * 2 / math.comb(10, 5) / stats.PAIRWISE_WEIGHT)
    assert joined < omnibus


def test_joining_the_pairwise_tests_costs_the_omnibus_a_quarter_and_one_pair_nothing():
    blocks = [[1.0, 2, 3, 4, 5], [6.0, 7, 8, 9, 10], [11.0, 12, 13, 14, 15]]
    omnibus = rank_test(blocks, random.Random(0))
    assert configuration_test(blocks, random.Random(0)) == pytest.approx(omnibus / 0.8)
    assert configuration_test(blocks[:2], random.Random(0)) == rank_test(blocks[:2], random.Random(0))
