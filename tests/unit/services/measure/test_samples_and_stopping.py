"""What enters the statistics, and when the screen may stop a configuration."""

from __future__ import annotations

import random

from services.measure.samples import JobSamples, collect
from services.measure.screen import round_order, still_active
from services.models import RunKind
from services.thresholds import Thresholds
from tests.unit.jobs import job, run

LIMITS = Thresholds()


def test_warm_up_failed_and_timed_out_runs_stay_out_of_the_medians():
    built = job(
        {
            "cpuset=0": [
                run(9.0, kind=RunKind.warmup, repetition=0),
                run(1.0),
                run(0.05, exit_code=2),
                run(30.0, timed_out=True, exit_code=-9),
                run(1.1),
            ]
        }
    )
    samples = collect(built)
    assert samples.wall == {"cpuset=0": [1.0, 1.1]}
    assert samples.failed == {"cpuset=0": 2}


def test_a_pytest_run_with_a_failing_test_still_times_its_passing_tests():
    tests = {"t.py::ok": 0.2, "t.py::broken": 0.01}
    built = job(
        {
            "cpuset=0": [
                run(1.0, exit_code=1, tests=tests, outcomes={"t.py::broken": "failed"}),
                run(1.0, timed_out=True, exit_code=-9, tests={"t.py::ok": 5.0}),
                run(1.0, exit_code=4, tests={"t.py::ok": 7.0}),  # usage error: nothing was timed properly
            ]
        }
    )
    samples = collect(built)
    assert samples.tests == {"t.py::ok": {"cpuset=0": [0.2]}}
    assert samples.wall == {"cpuset=0": []}


def test_no_configuration_stops_before_the_minimum_however_clear():
    samples = JobSamples(wall={"a": [1.0, 1.0, 1.0, 1.0], "b": [9.0, 9.0, 9.0, 9.0]})
    assert LIMITS.min_repetitions >= 5
    assert still_active(["a", "b"], samples, LIMITS, repetition=4, repeat=20) == ["a", "b"]
    samples = JobSamples(wall={"a": [1.0] * 5, "b": [9.0] * 5})
    assert still_active(["a", "b"], samples, LIMITS, repetition=5, repeat=20) == []


def test_a_two_mode_configuration_is_never_stopped_early():
    # latency_flaky needs every run it can get: the bimodal one runs on, the steady one stops
    samples = JobSamples(wall={"steady": [1.0, 1.01, 0.99, 1.0, 1.0], "bimodal": [1.0, 1.0, 3.0, 1.0, 3.0]})
    assert still_active(["steady", "bimodal"], samples, LIMITS, repetition=5, repeat=20) == ["bimodal"]


def test_the_last_round_stops_everything():
    samples = JobSamples(wall={"a": [1.0, 5.0]})
    assert still_active(["a"], samples, LIMITS, repetition=2, repeat=2) == []


def test_sub_resolution_tests_do_not_keep_a_configuration_running():
    samples = JobSamples(
        wall={"a": [1.0] * 5, "b": [1.01] * 5},
        tests={"fast": {"a": [0.0, 0.0, 0.0, 0.0, 0.0], "b": [0.0, 0.0, 0.0, 0.0, 0.0]}},
    )
    assert still_active(["a", "b"], samples, LIMITS, repetition=5, repeat=20) == []


def test_a_configuration_that_always_fails_stops_at_the_minimum():
    samples = JobSamples(wall={"a": [], "b": [1.0] * 5}, failed={"a": 5, "b": 0})
    assert "a" not in still_active(["a", "b"], samples, LIMITS, repetition=5, repeat=20)


def test_round_order_is_a_shuffle_reproduced_by_its_seed():
    labels = ["cpuset=0", "cpuset=0-1", "cpus=0.5"]
    first = [round_order(random.Random(42), labels) for _ in range(1)]
    rng_a, rng_b = random.Random(42), random.Random(42)
    rounds_a = [round_order(rng_a, labels) for _ in range(20)]
    rounds_b = [round_order(rng_b, labels) for _ in range(20)]
    assert rounds_a == rounds_b and rounds_a[0] == first[0]
    assert all(sorted(r) == sorted(labels) for r in rounds_a)
    assert len({tuple(r) for r in rounds_a}) > 1  # the order changes between rounds
    assert labels == ["cpuset=0", "cpuset=0-1", "cpus=0.5"]  # the caller's list is left alone


def test_a_pair_apart_but_not_yet_a_discovery_gets_more_runs_and_only_that_pair():
    # docs/explanations/statistics.md: pinned 0.055 s against 0.014 s on two cores, every run apart, the quota's
    # runs over both; among ten tests judged, 5 runs a side cannot make it a discovery.
    steady = {"cpuset=0": [0.02] * 5, "cpuset=0-1": [0.02] * 5, "cpus=0.5": [0.02] * 5}
    tests = {f"t{i}": dict(steady) for i in range(9)}
    tests["ws"] = {
        "cpuset=0": [0.055, 0.054, 0.056, 0.055, 0.057],
        "cpuset=0-1": [0.014] * 5,
        "cpus=0.5": [0.012, 0.013, 0.070, 0.072, 0.074],
    }
    every = ["cpuset=0", "cpuset=0-1", "cpus=0.5"]
    samples = JobSamples(wall={}, tests=tests)
    assert still_active(every, samples, LIMITS, repetition=5, repeat=5) == []  # without the job's configurations
    assert still_active([], samples, LIMITS, repetition=5, repeat=5, configs=every) == ["cpuset=0", "cpuset=0-1"]
    # three more runs each, still apart: a discovery, so nothing more
    tests["ws"]["cpuset=0"] += [0.055] * 3
    tests["ws"]["cpuset=0-1"] += [0.014] * 3
    assert LIMITS.undecided_extra_runs == 4
    assert still_active([], samples, LIMITS, repetition=8, repeat=5, configs=every) == []
    # runs that blur the pair again keep it going, but never beyond undecided_extra_runs
    tests["ws"]["cpuset=0"][5:] = [0.013, 0.056, 0.055]
    assert still_active([], samples, LIMITS, repetition=8, repeat=5, configs=every) == ["cpuset=0", "cpuset=0-1"]
    assert still_active([], samples, LIMITS, repetition=9, repeat=5, configs=every) == []


def test_a_pair_the_configurations_share_noise_over_gets_no_extra_runs():
    samples = JobSamples(wall={"a": [1.0, 1.3, 0.9, 1.1, 1.2], "b": [1.1, 1.0, 1.2, 0.95, 1.25]})
    assert still_active([], samples, LIMITS, repetition=5, repeat=5, configs=["a", "b"]) == []
