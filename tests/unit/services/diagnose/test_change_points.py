"""The slower_since detector on series: Otava's E-Divisive means and the thresholds after it."""

from __future__ import annotations

import random

import pytest

from services.diagnose.change_points import branch_of, change_points, slower_steps
from services.thresholds import Thresholds

LIMITS = Thresholds()


def noisy(
    length: int, seed: int, *, step_at: int | None = None, factor: float = 1.0, noise: float = 0.05
) -> list[float]:
    """Per-push medians of a 100 ms test, Gaussian noise of ``noise`` (relative), slower by
    ``factor`` from ``step_at`` on."""
    rng = random.Random(seed)
    return [
        0.1 * (factor if step_at is not None and i >= step_at else 1.0) * (1 + rng.gauss(0, noise))
        for i in range(length)
    ]


@pytest.mark.parametrize("factor", [1.5, 2.0])
@pytest.mark.parametrize("step_at", [4, 20, 36])
def test_a_step_with_5_percent_noise_is_found_at_its_push(factor: float, step_at: int):
    for seed in range(5):
        steps = slower_steps(noisy(40, seed, step_at=step_at, factor=factor), LIMITS)
        assert [s.index for s in steps] == [step_at], (factor, step_at, seed)
        step = steps[0]
        assert step.ratio == pytest.approx(factor, rel=0.08)
        assert step.before.ci_high < step.after.ci_low
        assert step.p_value < LIMITS.slower_since_max_pvalue


def test_twenty_flat_noisy_series_have_no_step():
    for seed in range(20):
        assert slower_steps(noisy(40, 100 + seed), LIMITS) == [], seed


def test_a_step_needs_pushes_on_both_sides():
    series = noisy(31, 7, step_at=28, factor=2.0)  # three slow pushes so far
    assert [s.index for s in change_points(series, window=50, max_pvalue=0.001)] == [28]
    assert slower_steps(series, LIMITS) == []
    series = noisy(32, 7, step_at=28, factor=2.0)  # the fourth
    assert [s.index for s in slower_steps(series, LIMITS)] == [28]


def test_one_job_on_a_busy_machine_is_no_step():
    # Otava splits a lone 1.5x job off as a segment of its own; it is no change of the code.
    series = noisy(40, 1)
    series[35] *= 2.0
    assert [s.index for s in change_points(series, window=50, max_pvalue=0.001)] == [35, 36]
    assert slower_steps(series, LIMITS) == []


def test_a_faster_step_is_no_finding_and_bounds_the_next():
    series = noisy(20, 1) + noisy(20, 2, factor=0.5, step_at=0) + noisy(20, 3, factor=1.0, step_at=0)
    # 100 ms, then 50 ms from push 20, back to 100 ms from push 40: only the second is slower.
    assert [s.index for s in change_points(series, window=50, max_pvalue=0.001)] == [20, 40]
    steps = slower_steps(series, LIMITS)
    assert [s.index for s in steps] == [40]
    assert (steps[0].segment_start, steps[0].segment_end) == (20, 60)
    assert steps[0].ratio == pytest.approx(2.0, rel=0.08)


def test_a_small_step_or_a_tiny_test_is_no_finding():
    assert slower_steps(noisy(40, 5, step_at=20, factor=1.1, noise=0.01), LIMITS) == []  # below 1.2x
    tiny = [v / 100 for v in noisy(40, 5, step_at=20, factor=2.0)]  # 1 ms -> 2 ms
    assert slower_steps(tiny, LIMITS) == []


def test_branch_names():
    assert branch_of("refs/heads/main") == "main"
    assert branch_of("refs/pull/3/head", "feature") == "feature"
    assert branch_of(None) == ""
