import random

import pytest

from services.measure.stats import compare, median_interval, pair_settled


def test_interval_is_exact_order_statistics():
    samples = list(range(1, 21))  # n=20: the 95 % interval is [x(6), x(15)]
    summary = median_interval([float(s) for s in samples])
    assert summary.median == 10.5
    assert (summary.ci_low, summary.ci_high) == (6.0, 15.0)
    assert summary.confidence >= 0.95


def test_few_samples_give_min_max_with_their_real_confidence():
    summary = median_interval([3.0, 1.0, 2.0])
    assert (summary.ci_low, summary.median, summary.ci_high) == (1.0, 2.0, 3.0)
    assert summary.confidence == pytest.approx(0.75)


def test_interval_covers_the_true_median_about_as_often_as_it_claims():
    rng = random.Random(7)
    hits = 0
    trials = 2000
    for _ in range(trials):
        sample = [rng.expovariate(1.0) for _ in range(15)]  # skewed, true median ln 2
        summary = median_interval(sample)
        hits += summary.ci_low <= 0.6931 <= summary.ci_high
    assert hits / trials >= 0.95 - 0.02


def test_compare_names_slowest_and_fastest():
    summaries = {"a": median_interval([1.0, 1.1, 0.9]), "b": median_interval([5.0, 5.2, 4.8])}
    comparison = compare(summaries)
    assert (comparison.slow, comparison.fast) == ("b", "a")
    assert comparison.ratio == pytest.approx(5.0)
    assert comparison.disjoint and comparison.is_sensitive(2.0)


def test_overlapping_intervals_are_not_sensitive_whatever_the_ratio():
    summaries = {"a": median_interval([1.0, 1.0, 9.0]), "b": median_interval([0.5, 3.0, 3.0])}
    assert not compare(summaries).is_sensitive(2.0)


def test_settled_when_clearly_apart_or_clearly_close():
    fast = median_interval([1.0, 1.05, 1.1])
    assert pair_settled(median_interval([5.0, 5.5, 6.0]), fast, 2.0)
    assert pair_settled(median_interval([1.0, 1.2, 1.3]), fast, 2.0)
    assert not pair_settled(median_interval([1.5, 2.2, 4.0]), fast, 2.0)
