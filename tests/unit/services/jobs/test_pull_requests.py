"""A pull request's head against its base: verdicts from interleaved samples (no database)."""

from __future__ import annotations

import math
import random

import pytest

from services.jobs.pull_requests import IMPROVED, REGRESSED, TOO_NOISY, UNCHANGED, compare
from services.measure.samples import JobSamples
from services.measure.stats import ratio_interval
from services.thresholds import Thresholds

LIMITS = Thresholds()


def around(median: float, n: int, spread: float = 0.03, seed: int = 1) -> list[float]:
    rng = random.Random(seed)
    return [median * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


def samples(tests: dict[str, list[float]], label: str = "cpuset=0") -> JobSamples:
    walls = [sum(values) + 0.3 for values in zip(*tests.values(), strict=True)]
    return JobSamples(wall={label: walls}, tests={test: {label: values} for test, values in tests.items()})


def verdicts(base: JobSamples, head: JobSamples) -> dict[str | None, str]:
    return {change.test_id: change.verdict for change in compare(base, head, LIMITS, seed=7)}


def test_a_test_five_times_slower_on_the_head_regressed_the_others_did_not():
    base = samples({"t.py::test_a": around(0.03, 5, seed=1), "t.py::test_b": around(0.05, 5, seed=2)})
    head = samples({"t.py::test_a": around(0.15, 5, seed=3), "t.py::test_b": around(0.05, 5, seed=4)})
    found = verdicts(base, head)
    assert found["t.py::test_a"] == REGRESSED
    assert found["t.py::test_b"] == UNCHANGED
    change = next(c for c in compare(base, head, LIMITS, seed=7) if c.test_id == "t.py::test_a")
    assert change.ratio is not None and change.ratio_low is not None and change.ratio_high is not None
    assert 4 < change.ratio_low <= change.ratio <= change.ratio_high < 6.5
    assert change.p_value is not None and change.p_value < 0.01


def test_a_faster_head_is_improved():
    found = verdicts(samples({"t.py::x": around(0.2, 6, seed=1)}), samples({"t.py::x": around(0.05, 6, seed=2)}))
    assert found["t.py::x"] == IMPROVED


def test_a_change_below_the_10_ms_floor_is_unchanged_however_large_its_ratio():
    # 2 ms -> 6 ms: 3x, and the rank test is sure, but it is a scheduler tick.
    found = verdicts(samples({"t.py::x": around(0.002, 8, seed=1)}), samples({"t.py::x": around(0.006, 8, seed=2)}))
    assert found["t.py::x"] == UNCHANGED


def test_fewer_than_the_minimum_runs_on_a_side_is_too_noisy_to_tell():
    base = samples({"t.py::x": around(0.03, 4, seed=1)})
    head = samples({"t.py::x": around(0.15, 4, seed=2)})
    assert verdicts(base, head)["t.py::x"] == TOO_NOISY


def test_overlapping_spread_out_runs_are_too_noisy_to_tell():
    # The head's median is 1.5x the base's, but both sides range over 0.05-0.4 s.
    base = samples({"t.py::x": [0.05, 0.4, 0.1, 0.3, 0.08, 0.35]})
    head = samples({"t.py::x": [0.4, 0.06, 0.35, 0.32, 0.38, 0.09]})
    assert verdicts(base, head)["t.py::x"] == TOO_NOISY


def test_a_test_only_on_one_side_is_not_compared():
    base = samples({"t.py::old": around(0.03, 5)})
    head = samples({"t.py::new": around(0.03, 5)})
    assert set(verdicts(base, head)) == {None}  # only the whole command


def test_the_ratio_interval_is_seeded_and_brackets_the_ratio_of_medians():
    base, head = around(0.1, 7, 0.2, seed=1), around(0.3, 7, 0.2, seed=2)
    first, again = ratio_interval(base, head, seed=3), ratio_interval(base, head, seed=3)
    assert first == again
    assert first is not None
    ratio, low, high = first
    assert low <= ratio <= high and low > 1.5 and high < 6
    with pytest.raises(ValueError):
        ratio_interval([], head)


def test_a_test_below_the_clock_gets_a_verdict_and_no_ratio():
    # pytest's JUnit XML gives durations in milliseconds: `assert int("42") == 42` reads 0.000
    # in most runs and 0.001 in some, so bootstrap resamples of the base have a median of 0.
    base = samples({"t.py::test_parse": [0.0, 0.001, 0.0, 0.001, 0.001], "t.py::test_b": around(0.05, 5)})
    head = samples({"t.py::test_parse": [0.001, 0.0, 0.001, 0.001, 0.0], "t.py::test_b": around(0.05, 5, seed=2)})
    changes = {c.test_id: c for c in compare(base, head, LIMITS, seed=7)}
    parse = changes["t.py::test_parse"]
    assert parse.verdict == UNCHANGED and parse.ratio is None and parse.ratio_low is None and parse.ratio_high is None
    for change in changes.values():
        for number in (change.ratio, change.ratio_low, change.ratio_high, change.p_value):
            assert number is None or math.isfinite(number), change


def test_the_ratio_interval_has_no_upper_end_when_resampled_bases_reach_zero():
    assert ratio_interval([0.0, 0.0, 0.001, 0.001, 0.001], [0.002] * 5, seed=1) is None
    assert ratio_interval([0.0] * 5, [0.002] * 5) is None


def test_a_test_new_on_the_head_is_marked_new_and_left_out_of_the_whole_command():
    from services.jobs.pull_requests import NEW, head_samples, new_tests
    from services.models import RunKind
    from tests.unit.jobs import job, run

    # The base runs test_a (30 ms); the head runs test_a unchanged and adds test_new (2 s):
    # the whole command's wall grows by the new test alone ("regressed 1.22x" before).
    base_runs = [run(0.33 + d, kind=RunKind.base, tests={"t.py::test_a": 0.03 + d}) for d in around(0.0, 7, 0)]
    head_runs = [run(2.33 + d, tests={"t.py::test_a": 0.03 + d, "t.py::test_new": 2.0}) for d in around(0.0, 7, 0)]
    built = job({"cpuset=0": base_runs + head_runs})
    new = new_tests(built)
    assert new == {"t.py::test_new"}
    from services.measure.samples import collect

    changes = compare(collect(built, RunKind.base), head_samples(built, new), LIMITS, seed=7, new=new)
    found = {change.test_id: change for change in changes}
    assert found["t.py::test_new"].verdict == NEW and found["t.py::test_new"].base is None
    # The whole command: each head run's wall less the new test's 2 s, as the base ran it.
    assert found[None].verdict == UNCHANGED, found[None]
    assert found[None].head.median == pytest.approx(0.33, abs=0.01)
    # Without leaving it out, the command's comparison would call it regressed.
    unadjusted = {c.test_id: c.verdict for c in compare(collect(built, RunKind.base), collect(built), LIMITS, seed=7)}
    assert unadjusted[None] == REGRESSED


def test_a_test_the_base_ran_and_failed_is_not_new():
    from services.jobs.pull_requests import new_tests
    from services.models import RunKind
    from tests.unit.jobs import job, run

    base_runs = [
        run(0.3, kind=RunKind.base, exit_code=1, tests={"t.py::x": 0.1}, outcomes={"t.py::x": "failed"})
        for _ in range(5)
    ]
    head_runs = [run(0.3, tests={"t.py::x": 0.1}) for _ in range(5)]
    assert new_tests(job({"cpuset=0": base_runs + head_runs})) == frozenset()
