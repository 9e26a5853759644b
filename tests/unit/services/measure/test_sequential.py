"""A test's fresh runs against its history, judged one look at a time (no database)."""

from __future__ import annotations

import math
import random

import pytest

from services.measure.sequential import (
    DIFFERENT,
    SAME,
    UNDECIDED,
    SequentialRule,
    _u_cdf,
    goes_on,
    judge,
    shift_interval,
)

RULE = SequentialRule()


def around(median: float, n: int, sigma: float = 0.03, seed: int = 1) -> list[float]:
    rng = random.Random(seed)
    return [median * math.exp(rng.gauss(0.0, sigma)) for _ in range(n)]


def test_the_null_distribution_of_u_is_exact():
    # k runs all slower than h stored: p = 1 / C(h + k, k) (the arithmetic, checked).
    cdf = _u_cdf(2, 20)
    assert 1 - cdf[-2] == pytest.approx(1 / math.comb(22, 2))
    assert _u_cdf(1, 99)[0] == pytest.approx(1 / 100)
    assert cdf[-1] == pytest.approx(1.0)


def test_no_level_is_spent_on_looks_that_could_never_decide():
    # One run against 20 stored can reach p = 1/21 at best, far above 0.01.
    assert RULE.first_look(20) == 2
    weights = [RULE.weight(look, 20) for look in range(1, RULE.looks + 1)]
    assert weights[0] == 0 and weights[1] == 0.5 and sum(weights) == pytest.approx(1.0)


def test_two_runs_far_slower_than_twenty_stored_are_different_at_the_second_look():
    stored = around(0.1, 20)
    first = judge(stored, [0.25], RULE)
    assert first.verdict == UNDECIDED
    second = judge(stored, [0.25, 0.26], RULE)
    assert second.verdict == DIFFERENT and second.slower
    assert second.p_slower <= RULE.alpha and 2.2 < second.ratio < 2.8
    assert second.ratio_low is not None and second.ratio_low > 1


def test_runs_like_the_history_are_same_once_the_interval_is_inside_the_change_ratio():
    stored = around(0.1, 20, seed=2)
    judged = judge(stored, around(0.1, 5, seed=3), RULE)
    assert judged.verdict == SAME
    assert judged.ratio_low is not None and judged.ratio_high is not None
    assert 1 / RULE.change_ratio <= judged.ratio_low <= judged.ratio_high <= RULE.change_ratio


def test_a_change_below_the_floor_in_seconds_is_same_whatever_its_ratio():
    stored = [0.002] * 20
    assert judge(stored, [0.004, 0.004], RULE).verdict == SAME


def test_a_wide_history_leaves_a_small_move_undecided():
    stored = around(0.2, 20, sigma=0.4, seed=4)
    assert judge(stored, around(0.24, 3, sigma=0.4, seed=5), RULE).verdict == UNDECIDED


def test_the_screen_lets_through_only_runs_outside_the_history():
    stored = around(0.1, 20, seed=6)
    assert not goes_on(stored, 0.1, RULE)
    assert goes_on(stored, 0.2, RULE)
    assert goes_on(stored, 0.05, RULE)  # far faster: judged too (improved)


def test_a_run_a_scheduler_tick_from_its_history_stops_at_the_screen_however_extreme_its_rank():
    stored = around(0.004, 20, seed=7)
    assert goes_on(stored, 0.013, RULE) is False  # the slowest of 21, 9 ms from the median
    assert judge(stored, [0.013, 0.013], RULE).verdict == SAME  # what the looks would conclude
    assert goes_on(stored, 0.016, RULE)  # 12 ms: a move judge can call DIFFERENT


def test_the_shift_interval_has_no_bound_where_runs_are_too_few_for_its_level():
    ratio, low, high = shift_interval([0.2], around(0.1, 20), alpha=0.01)
    assert 1.8 < ratio < 2.2 and low is None and high is None


def test_false_alarms_stay_under_the_level_over_many_unchanged_tests():
    # Under no change, every look of every test: the sequential p-value is valid at any
    # stopping time, so "different and slower" at alpha stays under alpha per test.
    rng = random.Random(11)
    alarms = 0
    tests = 400
    for index in range(tests):
        stored = [round(0.05 * math.exp(rng.gauss(0, 0.3)), 3) for _ in range(20)]
        fresh: list[float] = []
        for _ in range(RULE.looks):
            fresh.append(round(0.05 * math.exp(rng.gauss(0, 0.3)), 3))
            judged = judge(stored, fresh, RULE, seed=index)
            if judged.verdict != UNDECIDED:
                break
        alarms += judged.verdict == DIFFERENT and judged.slower
    assert alarms / tests <= 0.02  # alpha 0.01, with room for 400 draws' noise


def test_bad_input_is_refused():
    with pytest.raises(ValueError):
        judge([], [0.1], RULE)
    with pytest.raises(ValueError):
        judge([0.1] * 20, [0.1] * (RULE.looks + 1), RULE)
