"""The survey of a suite of real size: which tests one run per configuration clears."""

from __future__ import annotations

from services.measure.samples import collect
from services.measure.survey import candidates, cleared_in_rounds, suspicion
from services.models import RunKind
from services.thresholds import Thresholds
from tests.unit.jobs import job, run

LIMITS = Thresholds()
HEALTHY = {f"t.py::test_{i}": 0.02 + i * 0.001 for i in range(30)}


def surveyed(per_config: dict[str, dict[str, float]], *, cpus=None, outcomes=None, user_share=1.0):
    """A job whose survey ran once per configuration with these test durations."""
    built = job(
        {
            label: [
                run(
                    sum(tests.values()) + 0.3,
                    user_s=(sum(tests.values()) + 0.3) * user_share,
                    kind=RunKind.survey,
                    repetition=0,
                    tests=tests,
                    outcomes=(outcomes or {}).get(label),
                )
            ]
            for label, tests in per_config.items()
        },
        cpus=cpus,
    )
    runs = {config.label: config.runs[0] for config in built.configs}
    return built, runs


def test_a_suite_whose_configurations_agree_is_cleared_whole():
    built, runs = surveyed({"cpuset=0": HEALTHY, "cpuset=0-1": {k: v * 1.1 for k, v in HEALTHY.items()}})
    assert candidates(runs, built.configs, LIMITS) == []


def test_a_test_slower_in_one_configuration_is_kept_and_tiny_differences_are_not():
    slow = {**HEALTHY, "t.py::test_3": 0.09, "t.py::test_4": 0.004}  # 4x and 0.023 s; and 4 ms, under the floor
    base = {**HEALTHY, "t.py::test_4": 0.001}
    built, runs = surveyed({"cpuset=0": base, "cpuset=0-1": slow})
    assert candidates(runs, built.configs, LIMITS) == ["t.py::test_3"]


def test_what_a_quota_explains_is_cleared_what_it_does_not_is_kept():
    # The command kept one CPU busy: under cpus=0.5 every test takes twice as long.
    # A throttling pause is allowed on top: test_7 (0.4 s) takes 6x, where 2x and a pause are physics.
    fast = {**HEALTHY, "t.py::test_7": 0.4}
    halved = {k: v * 2 for k, v in fast.items()}
    built, runs = surveyed({"cpuset=0-1": fast, "cpus=0.5": {**halved, "t.py::test_7": 2.4}}, cpus={"cpus=0.5": 0.5})
    assert candidates(runs, built.configs, LIMITS) == ["t.py::test_7"]


def test_failures_missing_results_and_stalls_are_kept_in_suite_order():
    missing = {k: v for k, v in HEALTHY.items() if k != "t.py::test_9"}
    built, runs = surveyed(
        {"cpuset=0": {**HEALTHY, "t.py::test_20": 2.5}, "cpuset=0-1": {**missing, "t.py::test_20": 2.6}},
        outcomes={"cpuset=0": {"t.py::test_2": "failed"}},
    )
    assert candidates(runs, built.configs, LIMITS, stall_after_s=2.0) == [
        "t.py::test_2",
        "t.py::test_9",
        "t.py::test_20",
    ]
    assert candidates(runs, built.configs, LIMITS) == ["t.py::test_2", "t.py::test_9"]


def test_a_surveyed_job_times_its_command_by_the_survey_and_its_tests_by_the_focused_runs():
    built = job(
        {
            "cpuset=0": [
                run(9.0, kind=RunKind.survey, repetition=0, tests={"t.py::a": 0.5, "t.py::b": 0.1}),
                *(run(0.7, kind=RunKind.focus, repetition=i, tests={"t.py::a": 0.4}) for i in range(1, 6)),
            ]
        }
    )
    samples = collect(built)
    assert samples.wall == {"cpuset=0": [9.0]}
    assert samples.tests == {"t.py::a": {"cpuset=0": [0.4] * 5}}


def test_a_test_the_previous_job_flagged_is_kept_even_when_its_runs_agree():
    # A test slow in half its runs is cleared when all three survey runs fall in its fast
    # mode (a quarter of the time): its finding in the previous job keeps it.
    built, runs = surveyed({"cpuset=0": HEALTHY, "cpuset=0-1": HEALTHY, "cpus=0.5": HEALTHY})
    flagged = {"t.py::test_5", "t.py::gone"}
    scores = suspicion(runs, built.configs, LIMITS, flagged=flagged)
    assert scores == {"t.py::test_5": LIMITS.survey_ratio}  # a test no longer in the suite costs nothing
    assert suspicion(runs, built.configs, LIMITS) == {}


def test_the_traced_run_is_judged_less_what_its_tracer_added():
    # The census traced cpuset=0-1: test_5 read 400 times at 0.19 ms a call (0.076 s
    # added), test_6 computes and is truly 3x slower there; test_7 truly 3x faster there,
    # hidden by its 1,050 traced sleeps (0.2 s).
    traced = {**HEALTHY, "t.py::test_5": 0.025 + 0.076, "t.py::test_6": 0.3, "t.py::test_7": 0.1 + 0.2}
    plain = {**HEALTHY, "t.py::test_5": 0.025, "t.py::test_6": 0.1, "t.py::test_7": 0.3}
    built, runs = surveyed({"cpuset=0": plain, "cpuset=0-1": traced})
    assert candidates(runs, built.configs, LIMITS) == ["t.py::test_5", "t.py::test_6"]  # the tracer misleads
    added = {"cpuset=0-1": {"t.py::test_5": 0.076, "t.py::test_7": 0.2}}
    scores = suspicion(runs, built.configs, LIMITS, tracer_s=added)
    assert list(scores) == ["t.py::test_6", "t.py::test_7"]


def test_focused_rounds_clear_what_each_of_them_clears_but_not_a_test_apart_once_nor_one_with_two_modes():
    kept = ["t.py::test_1", "t.py::test_3", "t.py::test_8"]
    first = {**HEALTHY, "t.py::test_3": 0.09, "t.py::test_8": 0.04}  # test_3 apart from cpuset=0 in round 1 only
    built, round_1 = surveyed({"cpuset=0": {**HEALTHY, "t.py::test_8": 0.04}, "cpuset=0-1": first})
    _, round_2 = surveyed(
        {"cpuset=0": {**HEALTHY, "t.py::test_8": 0.4}, "cpuset=0-1": {**HEALTHY, "t.py::test_8": 0.4}}
    )
    assert cleared_in_rounds([round_1, round_2], built.configs, LIMITS, kept) == ["t.py::test_1"]
    # A test missing from a configuration of a round, or from a whole round, is never cleared by it.
    _, round_3 = surveyed(
        {"cpuset=0": HEALTHY, "cpuset=0-1": {k: v for k, v in HEALTHY.items() if k != "t.py::test_1"}}
    )
    absent = [*kept, "t.py::test_99"]
    assert cleared_in_rounds([round_1, round_3], built.configs, LIMITS, absent) == ["t.py::test_8"]


def test_a_test_whose_survey_run_was_in_another_mode_is_not_cleared_by_its_focused_rounds():
    built, survey = surveyed({"cpuset=0": {**HEALTHY, "t.py::test_8": 0.4}, "cpuset=0-1": HEALTHY})
    _, round_1 = surveyed({"cpuset=0": HEALTHY, "cpuset=0-1": HEALTHY})
    _, round_2 = surveyed({"cpuset=0": HEALTHY, "cpuset=0-1": HEALTHY})
    kept = ["t.py::test_1", "t.py::test_8"]
    assert cleared_in_rounds([round_1, round_2], built.configs, LIMITS, kept) == kept
    assert cleared_in_rounds([round_1, round_2], built.configs, LIMITS, kept, survey) == ["t.py::test_1"]
