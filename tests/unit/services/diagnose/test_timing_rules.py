"""latency_flaky, cpu_throttling, command_failed and the observer-effect note on synthetic runs."""

from __future__ import annotations

import random

import pytest

from services.diagnose import command_failed, cpu_throttling, latency_flaky, observer_effect
from services.diagnose.context import RuleContext
from services.diagnose.diagnose import RULES
from services.measure.cgroups import THROTTLE_PAUSE_S
from services.measure.samples import JobSamples, collect
from services.models import RunKind
from services.thresholds import Thresholds
from tests.unit.jobs import evidence, job, run

LIMITS = Thresholds()


# --- latency_flaky ------------------------------------------------------------------


def test_sub_millisecond_groups_do_not_divide_by_zero():
    # The crash of a healthy suite of fast tests: a fast group whose median is 0.000 s
    values = [0.0, 0.0, 0.001, 0.003, 0.003]
    assert latency_flaky.modes(values, LIMITS, resolution=0.001) is None
    samples = JobSamples(tests={f"t::fast{i}": {"cpuset=0": values, "cpuset=0-1": values} for i in range(40)})
    assert latency_flaky.judge(samples, LIMITS) == []


def test_a_slow_mode_over_a_sub_millisecond_fast_mode_is_found_as_a_lower_bound():
    values = [0.0, 0.0, 0.0, 0.2, 0.2, 0.0]
    [finding] = latency_flaky.judge(JobSamples(tests={"t::timer": {"cpuset=0": values}}), LIMITS)
    assert "at least 200.0x slower" in finding.title
    assert finding.metrics.stored()["ratio"] == 200.0


def test_latency_flaky_needs_five_runs():
    values = [0.1, 0.1, 0.5, 0.5]
    assert latency_flaky.judge(JobSamples(wall={"a": values}), LIMITS) == []
    assert latency_flaky.judge(JobSamples(wall={"a": [*values, 0.1]}), LIMITS)


def test_a_long_tail_is_not_two_latencies():
    # The gevent corpus case's healthy twin on one core of a shared machine: the top two
    # runs' median is 2x the bottom three's, but the runs fill the range between (the
    # nearest across the split are 1.5x apart): a tail, not a second mode.
    values = [0.201, 0.296, 0.138, 0.319, 0.153]
    assert latency_flaky.modes(values, LIMITS) is None
    [note] = latency_flaky.judge(JobSamples(wall={"cpuset=0": values}), LIMITS)
    assert note.metrics.stored()["pattern"] == "dispersed" and note.severity == "low"


def test_two_clusters_with_nothing_between_are_two_latencies():
    # examples/handoff.py on two cores (corpus run, 22 Nov): slow while the other core was
    # idle, fast while a neighbour kept it busy. 4.3x between the nearest runs.
    fast, slow = latency_flaky.modes([2.195, 0.244, 2.54, 1.956, 0.459], LIMITS)
    assert fast == [0.244, 0.459] and slow == [1.956, 2.195, 2.54]


def test_two_latencies_that_follow_the_neighbours_load_are_a_low_note():
    # The same hand-off runs with their recorded neighbour load: the two fast runs are the
    # two timed while another process kept the second core busy. That is the machine, not
    # a hidden state of the program's.
    values = [2.195, 0.244, 2.54, 1.956, 0.459]
    busy = [0.02, 0.97, 0.01, 0.03, 0.88]
    samples = collect(job({"cpuset=0-1": [run(v, foreign_cpus=f) for v, f in zip(values, busy, strict=True)]}))
    [note] = latency_flaky.judge(samples, LIMITS)
    assert note.severity == "low" and "follow the machine's other work" in note.title
    assert note.metrics.stored()["neighbour_load"] == {"fast": 0.925, "slow": 0.02}
    assert "0.9 CPUs busy during the fast runs" in note.detail

    quiet = collect(job({"cpuset=0-1": [run(v, foreign_cpus=0.02) for v in values]}))
    [finding] = latency_flaky.judge(quiet, LIMITS)
    assert finding.severity == "medium" and "neighbour_load" not in finding.metrics.stored()


def test_a_busy_machine_during_both_groups_explains_nothing():
    # Load alike on both sides of the split: the split is the program's own.
    values = [2.195, 0.244, 2.54, 1.956, 0.459]
    samples = collect(job({"cpuset=0-1": [run(v, foreign_cpus=0.9) for v in values]}))
    [finding] = latency_flaky.judge(samples, LIMITS)
    assert finding.severity == "medium"


def test_two_latencies_in_a_later_configuration_are_not_hidden_by_an_earlier_scatter():
    # The Faker corpus case (22 Nov): whichever test runs first pays for Faker's session
    # instance. On one core this test ran first once (a scatter); under cpus=0.5 twice.
    samples = JobSamples(
        tests={
            "t::email": {
                "cpuset=0": [0.001, 0.001, 0.158, 0.001, 0.001],
                "cpus=0.5": [0.001, 0.205, 0.001, 0.357, 0.001],
            }
        }
    )
    [finding] = latency_flaky.judge(samples, LIMITS)
    assert finding.severity == "medium" and finding.config_label == "cpus=0.5"
    assert finding.metrics.stored()["slow_runs"] == [0.205, 0.357]


def test_latencies_one_throttling_pause_apart_under_a_quota_are_no_finding():
    # pytest_plugins' first test under cpus=0.5 (corpus run, 22 Nov): 20 ms when the
    # quota lasted through it, 70 ms when the kernel paused the process for the rest of
    # a 100 ms period in the middle of it. Nothing varies but the quota's phase.
    values = [0.021, 0.072, 0.070, 0.083, 0.020]
    throttled = collect(job({"cpus=0.5": [run(1.4, tests={"t::square": v}) for v in values]}, cpus={"cpus=0.5": 0.5}))
    assert latency_flaky.judge(throttled, LIMITS) == []
    # A healthy 50 ms command under cpus=0.5 (CI, 22 Nov): a scatter, not two groups,
    # but no wider than one pause either.
    scattered = [0.055, 0.130, 0.070, 0.053, 0.096]
    assert latency_flaky.dispersed(scattered, LIMITS)
    command = collect(job({"cpus=0.5": [run(v) for v in scattered]}, cpus={"cpus=0.5": 0.5}))
    assert latency_flaky.judge(command, LIMITS) == []
    # The same runs on a pinned core (no quota) are two latencies of the program's own.
    pinned = collect(job({"cpuset=0": [run(1.4, tests={"t::square": v}) for v in values]}))
    [finding] = latency_flaky.judge(pinned, LIMITS)
    assert finding.severity == "medium"
    # And under a quota a difference of several periods is not the quota's phase.
    slower = [0.021, 0.42, 0.40, 0.43, 0.020]
    quota = collect(job({"cpus=0.5": [run(1.8, tests={"t::square": v}) for v in slower]}, cpus={"cpus=0.5": 0.5}))
    [finding] = latency_flaky.judge(quota, LIMITS)
    assert finding.severity == "medium"


def test_an_even_spread_is_dispersed_not_two_modes():
    # every run 2x the previous: the widest gap is no wider than the groups either side
    values = [0.1, 0.2, 0.4, 0.8, 1.6]
    assert latency_flaky.modes(values, LIMITS) is None


def _rate(draw, runs: int, trials: int, seed: int) -> float:
    rng = random.Random(seed)
    return (
        sum(latency_flaky.modes([draw(rng) for _ in range(runs)], LIMITS) is not None for _ in range(trials)) / trials
    )


def test_unimodal_noise_is_rarely_called_two_latencies():
    # Multiplicative noise and a scheduler's exponential tail on a 0.2 s run, 5 runs:
    # splitting at the largest ratio between medians called 6-8 % of these two-moded
    # the gap rule well under 1 %.
    lognormal = lambda rng: 0.2 * rng.lognormvariate(0, 0.3)  # noqa: E731
    tail = lambda rng: 0.2 + rng.expovariate(1 / 0.1)  # noqa: E731
    assert _rate(lognormal, 5, 4000, seed=1) <= 0.01
    assert _rate(tail, 5, 4000, seed=2) <= 0.01


def test_a_hidden_state_is_found_whenever_both_groups_have_two_runs():
    # 30 % of runs 5x slower (a stale lock): with 9 runs both groups have two or more in
    # 80 % of jobs, and the rule finds nearly all of those.
    bimodal = lambda rng: 0.2 * rng.lognormvariate(0, 0.1) * (5 if rng.random() < 0.3 else 1)  # noqa: E731
    assert _rate(bimodal, 9, 2000, seed=3) >= 0.75


# --- cpu_throttling ------------------------------------------------------------------


def quota_runs(threads: int, quota: float, wall: float = 2.0, n: int = 5):
    # Under the quota the program gets quota x wall of CPU; each of its runnable threads
    # is held back for the rest of every throttled period (summed per CPU).
    cpu = quota * wall
    held = wall - cpu / min(threads, 2)
    return [
        run(wall, user_s=cpu, nr_periods=int(wall * 10), nr_throttled=int(wall * 10) - 1, throttled_s=held * threads)
        for _ in range(n)
    ]


def test_a_single_thread_slowed_by_the_quota_factor_is_physics_not_a_finding():
    built = job({"cpus=0.5": quota_runs(1, 0.5), "cpuset=0-1": [run(1.0)] * 5}, cpus={"cpus=0.5": 0.5})
    assert cpu_throttling.check(RuleContext(built, LIMITS)) == []


def test_a_pool_that_takes_its_cpu_time_over_the_quota_is_the_quota_s_share_not_a_finding():
    # Two processes computing 1 s of CPU: 0.5 s on two cores, 2 s under cpus=0.5, throttled
    # in nearly every period. One process would take the same 2 s: physics (docs/reference/findings.md).
    built = job({"cpus=0.5": quota_runs(2, 0.5), "cpuset=0-1": [run(0.5, user_s=1.0)] * 5}, cpus={"cpus=0.5": 0.5})
    assert cpu_throttling.check(RuleContext(built, LIMITS)) == []


def test_throttling_that_costs_beyond_the_quota_s_share_is_a_finding_with_advice_on_pool_size():
    # The same 1 s of useful CPU, but under the quota its threads burn 2 s (they spin while
    # rationed) and the run takes 4 s where 2.12 s is the quota's share.
    built = job(
        {"cpus=0.5": quota_runs(2, 0.5, wall=4.0), "cpuset=0-1": [run(0.5, user_s=1.0)] * 5}, cpus={"cpus=0.5": 0.5}
    )
    [finding] = cpu_throttling.check(RuleContext(built, LIMITS))
    assert finding.config_label == "cpus=0.5" and finding.severity == "medium"
    assert finding.metrics.stored()["accounts_s"] == pytest.approx(4.0 - 2.0 - THROTTLE_PAUSE_S)
    assert "beyond the quota's share" in finding.detail and "inflated to 2.000 s" in finding.detail
    assert finding.metrics.stored()["cpu_demand"] >= 1.9
    assert "Size thread and process pools to the quota" in finding.detail
    metrics = finding.metrics.stored()
    assert f"{metrics['nr_throttled']} of {metrics['nr_periods']} CFS periods" in finding.detail


CPUSETS = {"cpuset=0": "0", "cpuset=0-1": "0-1"}


def matrix(one: tuple[float, float], two: tuple[float, float], quota: tuple[float, float, float], **kwargs):
    """Five runs a configuration of (wall, CPU) on one core, on two, and (wall, CPU,
    throttled) under cpus=0.5, throttled in every period."""
    wall, cpu, held = quota
    periods = max(2, round(wall * 10))
    configs = {
        "cpuset=0": [run(one[0], user_s=one[1])] * 5,
        "cpuset=0-1": [run(two[0], user_s=two[1])] * 5,
        "cpus=0.5": [run(wall, user_s=cpu, nr_periods=periods, nr_throttled=periods - 1, throttled_s=held, **kwargs)]
        * 5,
    }
    return RuleContext(job(configs, cpus={"cpus=0.5": 0.5}, cpusets=CPUSETS), LIMITS)


def test_an_oversubscribed_pool_is_charged_for_its_spinning_under_the_quota():
    # The BLAS pool: 0.17 s on one core, 1.1x faster on two with 1.7 CPUs busy, and
    # 0.59 s under cpus=0.5, throttled 0.71 s. Its work is the one core's 0.17 CPU-s, not
    # the 0.26 its second thread spun to on two cores: the quota's share is 0.46 s.
    [finding] = cpu_throttling.check(matrix((0.17, 0.168), (0.155, 0.264), (0.59, 0.295, 0.71)))
    metrics = finding.metrics.stored()
    expected = 0.168 / 0.5 + (0.17 - 0.168) + THROTTLE_PAUSE_S
    assert metrics["expected_s"] == pytest.approx(expected)
    assert metrics["accounts_s"] == pytest.approx(0.59 - expected)
    assert metrics["useful_config"] == "cpuset=0" and metrics["speedup"] == pytest.approx(0.17 / 0.155)
    assert metrics["spinning_s"] == pytest.approx(0.264 - 0.168)
    assert finding.severity == "medium"  # 0.13 s of a 0.59 s run
    assert f"{metrics['accounts_s']:.3f} s beyond the quota's share" in finding.detail
    assert "throttled 0.710 s" in finding.detail and "spinning" in finding.detail


def test_an_openblas_pool_measured_here_is_charged_and_its_one_thread_twin_is_not():
    # examples/corpus/numpy_blas_pool, medians of 5 interleaved runs: 1.24 s on one core,
    # 1.04 s on two with 2.03 CPU-s, 4.26 s under cpus=0.5 with 2.14 CPU-s, 6.16 s throttled.
    [finding] = cpu_throttling.check(matrix((1.244, 1.240), (1.035, 2.031), (4.256, 2.142, 6.157)))
    assert finding.metrics.stored()["accounts_s"] == pytest.approx(4.256 - 1.240 / 0.5 - 0.004 - THROTTLE_PAUSE_S)
    assert finding.severity == "medium" and "inflated to 2.142 s" in finding.detail
    # OPENBLAS_NUM_THREADS=1: one thread, 2.57 s under the quota, 1.23 s throttled.
    assert cpu_throttling.check(matrix((1.155, 1.154), (1.259, 1.258), (2.567, 1.306, 1.229))) == []


def test_two_xdist_workers_under_the_quota_are_not_charged():
    # examples/corpus/xdist_suite's healthy twin (pytest -n 2), medians of 5 interleaved
    # runs: one core 1.15 s (its two workers share it), two cores 0.70 s (1.6x), under
    # cpus=0.5 2.49 s with 1.28 CPU-s, 11 % over the one core's. Its work explains 2.42 s:
    # 0.07 s beyond, 3 % of the run, within what two configurations' medians differ by.
    xdist = matrix((1.154, 1.152), (0.704, 1.082), (2.494, 1.279, 2.842))
    assert cpu_throttling.check(xdist) == []


def quota_wall(one_cpu: float, share: float) -> float:
    """The quota run's wall at which the cost beyond the quota's share of ``one_cpu``
    CPU-s of work (on one core, busy all along) is ``share`` of the run."""
    return (one_cpu / 0.5 + THROTTLE_PAUSE_S) / (1 - share)


@pytest.mark.parametrize("margin, found", [(-0.01, False), (0.01, True)])
def test_a_pool_just_inside_and_just_over_the_quota_s_share(margin, found):
    # The same xdist workers, their quota run slowed to just under and just over the
    # share of the run that a finding needs: quiet, then a low note naming the seconds.
    wall = quota_wall(1.082, LIMITS.cpu_throttling_min_share + margin)
    drafts = cpu_throttling.check(matrix((1.082, 1.082), (0.704, 1.082), (wall, wall * 0.5, wall * 1.1)))
    assert bool(drafts) is found
    if found:
        assert drafts[0].severity == "low"
        assert drafts[0].metrics.stored()["accounts_s"] == pytest.approx(
            wall * (LIMITS.cpu_throttling_min_share + margin)
        )


@pytest.mark.parametrize("margin, severity", [(-0.01, "low"), (0.01, "medium")])
def test_the_cost_s_share_of_the_run_sets_the_severity(margin, severity):
    wall = quota_wall(1.0, LIMITS.cpu_throttling_medium_share + margin)
    [finding] = cpu_throttling.check(matrix((1.0, 1.0), (0.9, 1.8), (wall, wall * 0.5, wall * 1.2)))
    assert finding.severity == severity


@pytest.mark.parametrize("margin, found", [(-0.01, False), (0.01, True)])
def test_a_process_pool_doing_useful_work_within_the_quota_is_quiet(margin, found):
    # 2x faster on two cores, its CPU time twice its wall there: all of it work. Under the
    # quota it takes that work over the quota (quiet) until the run spends the finding's
    # share of it beyond.
    wall = quota_wall(1.0, LIMITS.cpu_throttling_min_share + margin)
    drafts = cpu_throttling.check(matrix((1.0, 1.0), (0.5, 1.0), (wall, wall * 0.5, wall * 1.0)))
    assert bool(drafts) is found
    if found:
        assert drafts[0].metrics.stored()["spinning_s"] == 0.0


def test_a_pool_without_a_one_core_run_is_judged_on_what_it_burns_in_parallel():
    # No configuration with fewer cores: the speedup is unknown, so the widest run's CPU
    # time stands for the work (the survey's one-core run under the census's tracer is no
    # timing run): the BLAS pool's 2.03 CPU-s explain its 4.26 s under cpus=0.5.
    context = matrix((1.244, 1.240), (1.035, 2.031), (4.256, 2.142, 6.157))
    context.job.configs = [config for config in context.job.configs if config.label != "cpuset=0"]
    assert cpu_throttling.check(context) == []


def test_a_neighbour_during_one_side_only_lowers_the_verdict():
    [alone] = cpu_throttling.check(matrix((1.244, 1.240), (1.035, 2.031), (4.256, 2.142, 6.157)))
    [beside] = cpu_throttling.check(matrix((1.244, 1.240), (1.035, 2.031), (4.256, 2.142, 6.157), foreign_cpus=1.0))
    assert (alone.severity, beside.severity) == ("medium", "low")
    assert "Other processes kept 1.0 CPUs busy" in beside.detail


def test_demand_counts_throttled_time_per_cpu():
    assert cpu_throttling.demand(user_s=1.0, sys_s=0.0, throttled_s=3.0, wall_s=2.0) == 2.0
    assert cpu_throttling.demand(user_s=1.0, sys_s=0.0, throttled_s=1.0, wall_s=2.0) == 1.0


def test_failed_runs_do_not_count_for_throttling():
    failing = [run(2.0, user_s=1.0, exit_code=1, nr_periods=20, nr_throttled=19, throttled_s=3.0)] * 5
    built = job({"cpus=0.5": failing}, cpus={"cpus=0.5": 0.5})
    assert cpu_throttling.check(RuleContext(built, LIMITS)) == []


# --- command_failed ------------------------------------------------------------------


def test_a_command_failing_in_every_run_is_a_high_finding_with_its_exit_code_and_output():
    tail = "Traceback (most recent call last):\n/usr/bin/python3: No module named pytest\n"
    built = job({label: [run(0.05, exit_code=1, output_tail=tail)] * 9 for label in ("a", "b", "c")})
    [finding] = command_failed.check(RuleContext(built, LIMITS))
    assert finding.severity == "high"
    assert finding.metrics.stored()["exit_code"] == 1 and finding.metrics.stored()["runs"] == 27
    assert finding.metrics.stored()["accounts_s"] > 0  # every run's time is the failure's
    assert "No module named pytest" in finding.detail and "every configuration" in finding.title


def test_timeouts_in_every_run_are_named_as_such():
    built = job({"a": [run(30.0, exit_code=-9, timed_out=True)] * 5, "b": [run(1.0)] * 5})
    [finding] = command_failed.check(RuleContext(built, LIMITS))
    assert finding.title == "The command timed out in all 5 runs with a" and finding.config_label == "a"


def test_one_success_is_not_command_failed():
    built = job({"a": [run(1.0, exit_code=1)] * 4 + [run(1.0)]})
    assert command_failed.check(RuleContext(built, LIMITS)) == []


def test_failing_tests_are_named_and_their_passing_neighbours_still_judged():
    tests = {"t.py::ok": 0.1, "t.py::broken": 0.01}
    built = job({"a": [run(1.0, exit_code=1, tests=tests, outcomes={"t.py::broken": "failed"})] * 5})
    [finding] = command_failed.check(RuleContext(built, LIMITS))
    assert finding.severity == "medium" and finding.metrics.stored()["failed_tests"] == ["t.py::broken"]
    # The one failing test owns the finding; two failing tests leave it on the command.
    assert finding.test_id == "t.py::broken" and finding.title.startswith("The test t.py::broken failed in all 5")
    outcomes = {"t.py::broken": "failed", "t.py::ok": "error"}
    built = job({"a": [run(1.0, exit_code=1, tests={**tests, "t.py::fine": 0.1}, outcomes=outcomes)] * 5})
    [finding] = command_failed.check(RuleContext(built, LIMITS))
    assert finding.test_id is None and finding.metrics.stored()["failed_tests"] == ["t.py::broken", "t.py::ok"]


# --- observer_effect: a note on the evidence, not a finding ---------------------------


def test_observer_effect_is_a_note_on_the_evidence_of_the_distorted_run():
    traced = run(8.0, kind=RunKind.evidence, probe="strace")
    quiet = run(1.05, kind=RunKind.evidence, probe="pyspy")
    built = job({"a": [run(1.0)] * 5 + [traced, quiet]})
    strace, pyspy = evidence(traced, "strace"), evidence(quiet, "pyspy")
    built.evidence = [strace, pyspy]
    notes = observer_effect.notes(RuleContext(built, LIMITS))
    assert set(notes) == {strace.id}
    assert notes[strace.id]["ratio"] == 8.0 and "8.0x slower under strace" in notes[strace.id]["text"]
    assert all(getattr(rule, "__module__", "") != observer_effect.__name__ for rule in RULES)
