"""cpu_sensitivity on synthetic samples: the clock, the floor, the runs, the suite."""

from __future__ import annotations

import random

import pytest

from services.diagnose import cpu_sensitivity
from services.measure.samples import JobSamples, collect
from services.models import RunKind
from services.thresholds import Thresholds
from tests.unit.jobs import job, run

LIMITS = Thresholds()


def suite(tests: dict[str, dict[str, list[float]]], wall: dict[str, list[float]] | None = None) -> JobSamples:
    return JobSamples(wall=wall or {}, tests=tests)


def test_a_clear_slowdown_is_found_with_its_numbers():
    [finding] = cpu_sensitivity.judge(
        suite({"t::slow": {"cpuset=0": [0.05, 0.051, 0.049, 0.05, 0.052], "cpus=0.5": [0.2, 0.21, 0.19, 0.2, 0.2]}}),
        LIMITS,
    )
    assert finding.test_id == "t::slow" and finding.config_label == "cpus=0.5"
    assert finding.metrics.stored()["ratio"] == 4.0 and finding.severity == "medium"
    assert finding.metrics.stored()["p_value"] < 0.01 and finding.metrics.stored()["family_size"] == 1
    assert "4.0x slower" in finding.title


def test_a_slowdown_timed_beside_a_busy_neighbour_is_lowered_and_says_so():
    fast = [0.05, 0.051, 0.049, 0.05, 0.052]
    slow = [0.2, 0.21, 0.19, 0.2, 0.2]

    def judged(slow_load: float) -> cpu_sensitivity.FindingDraft:
        configs = {
            "cpuset=0": [run(v, foreign_cpus=0.05) for v in fast],
            "cpus=0.5": [run(v, foreign_cpus=slow_load) for v in slow],
        }
        [finding] = cpu_sensitivity.judge(collect(job(configs)), LIMITS)
        return finding

    quiet, busy = judged(0.05), judged(1.1)
    assert quiet.severity == "medium" and "neighbour_load" not in quiet.metrics.stored()
    assert busy.severity == "low" and busy.metrics.stored()["ratio"] == quiet.metrics.stored()["ratio"] == 4.0
    assert busy.metrics.stored()["neighbour_load"] == {"slow": 1.1, "fast": 0.05}
    assert "1.1 CPUs busy during the cpus=0.5 runs and 0.1 during the cpuset=0 runs" in busy.detail


def test_sub_resolution_tests_are_too_fast_to_judge_never_infinitely_slower():
    # JUnit's 1 ms: a test at 0.000 s in one configuration and 0.001-0.002 in another
    samples = suite({"t::tiny": {"cpuset=0": [0.0] * 5, "cpus=0.5": [0.001, 0.002, 0.001, 0.002, 0.001]}})
    assert cpu_sensitivity.judge(samples, LIMITS) == []
    assert cpu_sensitivity.candidates(samples, LIMITS) == {}


def test_a_resolvable_pooled_median_over_a_zero_fast_side_still_gives_no_ratio():
    samples = suite(
        {
            "t::x": {
                "a": [0.0] * 5,
                "b": [0.0] * 5,
                "c": [0.03] * 5,
                "d": [0.03] * 5,
                "e": [0.03, 0.03, 0.03, 0.03, 0.03],
            }
        }
    )
    assert cpu_sensitivity.judge(samples, LIMITS) == []


def test_below_the_absolute_floor_a_ratio_is_no_finding():
    # 3x, unmistakable, but 4 ms: a scheduler tick
    samples = suite({"t::ms": {"a": [0.002] * 5, "b": [0.006, 0.006, 0.0061, 0.0059, 0.006]}})
    assert cpu_sensitivity.judge(samples, LIMITS) == []


def test_no_verdict_from_fewer_than_five_runs():
    samples = suite({"t::x": {"a": [0.1, 0.1, 0.1, 0.1], "b": [1.0, 1.0, 1.0, 1.0]}})
    assert cpu_sensitivity.judge(samples, LIMITS) == []
    samples.tests["t::x"] = {"a": [0.1] * 5, "b": [1.0] * 5}
    assert len(cpu_sensitivity.judge(samples, LIMITS)) == 1


def healthy_suite(rng: random.Random, count: int, runs: int) -> dict[str, dict[str, list[float]]]:
    """Noisy tests, every third bimodal, in three identical configurations."""
    tests = {}
    for i in range(count):
        base = rng.uniform(0.02, 0.3)
        bimodal = i % 3 == 0
        tests[f"t::healthy{i:02d}"] = {
            label: [
                round(base * rng.lognormvariate(0, 0.3) * (8 if bimodal and rng.random() < 0.4 else 1), 3)
                for _ in range(runs)
            ]
            for label in ("cpuset=0", "cpuset=0-1", "cpus=0.5")
        }
    return tests


def real_slowdown(runs: int) -> dict[str, list[float]]:
    # One configuration 4x slower, the other two interleaved: the least extreme way to
    # be entirely on top (for 5 runs each, p = 0.0021).
    return {
        "cpuset=0": [0.046 + 0.002 * i for i in range(runs)],
        "cpuset=0-1": [0.047 + 0.002 * i for i in range(runs)],
        "cpus=0.5": [0.2 + 0.001 * i for i in range(runs)],
    }


def test_false_discoveries_are_controlled_across_a_suite():
    # The chance extremes of a suite are not findings; the one real slowdown is.
    rng = random.Random(5)
    tests = healthy_suite(rng, 15, runs=5)
    tests["t::real"] = real_slowdown(runs=5)
    found = {f.test_id for f in cpu_sensitivity.judge(suite(tests), LIMITS, seed=3)}
    assert found == {"t::real"}


def test_a_large_suite_needs_more_runs_to_single_out_one_test():
    # With 5 runs a lone slowdown cannot beat the correction for 60 tests (its best p is
    # 0.002); it is reported as undecided, and 7 runs find it.
    rng = random.Random(5)
    tests = healthy_suite(rng, 60, runs=5)
    tests["t::real"] = real_slowdown(runs=5)
    assert cpu_sensitivity.judge(suite(tests), LIMITS, seed=3) == []
    assert [c.test_id for c in cpu_sensitivity.undecided(suite(tests), LIMITS, seed=3)] == ["t::real"]
    tests = healthy_suite(rng, 60, runs=7)
    tests["t::real"] = real_slowdown(runs=7)
    assert {f.test_id for f in cpu_sensitivity.judge(suite(tests), LIMITS, seed=3)} == {"t::real"}


def test_without_the_correction_the_same_suite_would_cry_wolf():
    # the point of the test above: judged one by one at 5 %, identical bimodal tests differ
    rng = random.Random(5)
    loose = LIMITS.model_copy(update={"cpu_sensitivity_fdr": 0.5})
    tests = {
        f"t::b{i}": {
            label: [round(0.05 * (8 if rng.random() < 0.4 else 1) * rng.lognormvariate(0, 0.1), 3) for _ in range(5)]
            for label in ("a", "b", "c")
        }
        for i in range(60)
    }
    assert cpu_sensitivity.judge(suite(tests), loose, seed=3)
    assert not cpu_sensitivity.judge(suite(tests), LIMITS, seed=3)


def test_the_whole_command_is_judged_in_the_same_family():
    samples = suite({}, wall={"a": [1.0, 1.01, 0.99, 1.0, 1.02], "b": [3.0, 3.1, 2.9, 3.0, 3.05]})
    [finding] = cpu_sensitivity.judge(samples, LIMITS)
    assert finding.test_id is None and "The command is 3.0x slower with b" in finding.title


def _runs(walls: list[float], cpu_share: float) -> list:
    return [run(w, user_s=w * cpu_share) for w in walls]


def test_a_slowdown_the_quota_explains_is_no_finding():
    # docs/reference/findings.md: a healthy CPU-bound program under cpus=0.5 is twice as slow by physics
    # (faker's twin, 22 Nov: 2.1x); two busy threads are four times as slow.
    one_thread = {"cpuset=0": _runs([0.95, 0.96, 0.94, 0.95, 0.97], 0.98), "cpus=0.5": _runs([2.0] * 5, 0.49)}
    assert cpu_sensitivity.judge(collect(job(one_thread, cpus={"cpus=0.5": 0.5})), LIMITS) == []
    two_threads = {"cpuset=0-1": _runs([0.25, 0.26, 0.24, 0.25, 0.25], 1.9), "cpus=0.5": _runs([1.0] * 5, 0.5)}
    assert cpu_sensitivity.judge(collect(job(two_threads, cpus={"cpus=0.5": 0.5})), LIMITS) == []
    # Without the quota recorded, the same numbers are a 2.1x slowdown (low).
    [unknown] = cpu_sensitivity.judge(collect(job(one_thread)), LIMITS)
    assert unknown.severity == "low" and "quota" not in unknown.metrics.stored()


def test_what_the_quota_does_not_explain_is_judged_and_said():
    # examples/handoff.py: the threads wait for each other, not for the CPU (30 % busy
    # on one core), yet under cpus=0.5 every hand-off meets a throttled period.
    configs = {"cpuset=0": _runs([0.1, 0.11, 0.1, 0.1, 0.1], 0.3), "cpus=0.5": _runs([5.0, 5.2, 4.9, 5.1, 5.0], 0.1)}
    [finding] = cpu_sensitivity.judge(collect(job(configs, cpus={"cpus=0.5": 0.5})), LIMITS)
    assert finding.config_label == "cpus=0.5" and finding.metrics.stored()["ratio"] == 50.0
    # expected: 0.1 s stretched by max(1, 0.3 / 0.5), plus one 120 ms pause
    assert finding.metrics.stored()["quota"]["expected_s"] == pytest.approx(0.22)
    assert finding.severity == "high" and "22.7x more than its quota explains" in finding.title
    assert "the quota explains 2.2x of the 50.0x" in finding.detail


def test_a_configuration_the_quota_explains_leaves_the_verdict_to_the_others():
    # Two threads computing on two cores: cpus=0.5 is the slowest (5x) but no slower than
    # their CPU time rationed to half a core (4x, plus a pause); one core (4x) has no
    # quota to explain it, so it is the verdict.
    configs = {
        "cpuset=0": _runs([0.4, 0.41, 0.4, 0.39, 0.4], 1.0),
        "cpuset=0-1": _runs([0.1, 0.1, 0.11, 0.1, 0.1], 2.0),
        "cpus=0.5": _runs([0.5, 0.52, 0.5, 0.49, 0.51], 0.5),
    }
    [finding] = cpu_sensitivity.judge(collect(job(configs, cpus={"cpus=0.5": 0.5})), LIMITS)
    assert finding.config_label == "cpuset=0" and finding.metrics.stored()["fast"]["config"] == "cpuset=0-1"
    assert finding.metrics.stored()["ratio"] == pytest.approx(4.0) and "quota" not in finding.metrics.stored()


def _pinned(configs: dict) -> object:
    built = job(configs)
    for config in built.configs:
        config.cpuset = config.label.removeprefix("cpuset=")
    return built


def test_parallel_work_pinned_to_fewer_cores_is_the_cores_share_not_a_finding():
    # docs/reference/findings.md: a process pool keeping two CPUs busy on two cores is twice as slow on one.
    pool = {"cpuset=0": _runs([0.2, 0.21, 0.2, 0.19, 0.2], 1.0), "cpuset=0-1": _runs([0.1, 0.1, 0.11, 0.1, 0.1], 1.95)}
    assert cpu_sensitivity.judge(collect(_pinned(pool)), LIMITS) == []
    # Five times as slow on one core is more than the lost core explains, and said so.
    worse = {**pool, "cpuset=0": _runs([0.5, 0.51, 0.5, 0.49, 0.5], 1.0)}
    [finding] = cpu_sensitivity.judge(collect(_pinned(worse)), LIMITS)
    assert finding.config_label == "cpuset=0" and finding.metrics.stored()["pinned"]["cpus"] == 1
    assert (
        "more than its fewer CPUs explain" in finding.title and "fewer CPUs explain 2.0x of the 5.0x" in finding.detail
    )


def test_the_hand_off_slower_on_more_cores_owes_nothing_to_pinning():
    handoff = {
        "cpuset=0": _runs([0.1, 0.11, 0.1, 0.1, 0.1], 0.9),
        "cpuset=0-1": _runs([0.5, 0.52, 0.49, 0.5, 0.5], 1.0),
    }
    [finding] = cpu_sensitivity.judge(collect(_pinned(handoff)), LIMITS)
    assert finding.config_label == "cpuset=0-1" and finding.metrics.stored()["ratio"] == pytest.approx(5.0)
    assert "pinned" not in finding.metrics.stored()


def _xdist_suite(exit_code: int) -> object:
    """A healthy suite run with `pytest -n 2`: two workers keep both cores busy (1.9 CPUs
    over the survey run with cpuset=0-1), so under cpus=0.5 each worker has a quarter of a
    CPU and every test takes about 4x (to 6.6x with the throttling pauses) as long. One
    unrelated test fails in every run (pytest exits 1)."""
    rng = random.Random(7)
    fast = {f"tests/test_x.py::test_{i}": 0.02 + 0.01 * i for i in range(16)}
    failing = {"tests/test_x.py::test_broken": 0.01}
    outcomes = {"tests/test_x.py::test_broken": "failed"}

    def runs(label: str, factor: tuple[float, float], share: float) -> list:
        survey = run(30.0, kind=RunKind.survey, exit_code=exit_code, user_s=30.0 * share, outcomes=outcomes)
        survey.test_results = []
        focused = [
            run(
                2.0,
                kind=RunKind.focus,
                exit_code=exit_code,
                user_s=2.0 * share,
                tests={**{t: d * rng.uniform(*factor) for t, d in fast.items()}, **failing},
                outcomes=outcomes,
                repetition=r,
            )
            for r in range(1, 6)
        ]
        return [survey, *focused]

    built = job(
        {"cpuset=0-1": runs("cpuset=0-1", (0.95, 1.05), 1.9), "cpus=0.5": runs("cpus=0.5", (4.0, 6.6), 0.5)},
        cpus={"cpus=0.5": 0.5},
    )
    built.command = ["python", "-m", "pytest", "-n", "2", "tests"]
    built.configs[0].cpuset = "0-1"
    return built


def test_two_xdist_workers_under_a_quota_are_the_quotas_share_even_beside_a_failing_test():
    # The suite's one failing test made every run exit 1, and the CPUs the command kept
    # busy were read from successful runs only: no share, so the 4x-6.6x of every test
    # was held against the fast median alone (16 MEDIUM findings on a real suite).
    assert cpu_sensitivity.judge(collect(_xdist_suite(exit_code=1)), LIMITS) == []
    assert cpu_sensitivity.judge(collect(_xdist_suite(exit_code=0)), LIMITS) == []
    samples = collect(_xdist_suite(exit_code=1))
    assert samples.cpu_share("cpuset=0-1") == pytest.approx(1.9)


def test_a_failed_run_of_a_program_that_is_not_pytest_says_nothing_of_its_share():
    configs = {"cpuset=0-1": [run(1.0, user_s=1.9, exit_code=1)] * 5, "cpus=0.5": [run(4.0, user_s=2.0)] * 5}
    assert collect(job(configs, cpus={"cpus=0.5": 0.5})).cpu_share("cpuset=0-1") is None
