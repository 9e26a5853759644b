"""timing_disagrees on recorded numbers: a run's reported test durations against the wall
and CPU time lagtrace measured (services/diagnose/timing_disagrees.py)."""

from __future__ import annotations

import pytest

from services.diagnose import timing_disagrees
from services.diagnose.context import RuleContext
from services.diagnose.diagnose import RULES
from services.diagnose.metrics import TimingDisagreesMetrics, metrics_of
from services.measure.cgroups import THROTTLE_PAUSE_S
from services.models import Job, Run, RunKind
from services.thresholds import Thresholds
from tests.unit.jobs import job, run

LIMITS = Thresholds()
SLEEPS = "test_s.py::test_sleep"
# Six tests sleeping 0.5 s each under `pytest -n 2`, timed by wait4 here (7 Dec 2026):
# wall, user and system time of three runs, and the durations the JUnit XML reported.
XDIST_RUNS = [(2.199, 0.784, 0.122), (2.165, 0.781, 0.127), (2.156, 0.777, 0.095)]
XDIST_DURATION = 0.501
# The same suite with a conftest multiplying report.duration by 1.5, which pytest-xdist's
# workers and controller both load: each case reported 1.128 s (2.25x).
INFLATED_RUNS = [(2.470, 0.865, 0.129), (2.143, 0.719, 0.131), (2.190, 0.854, 0.096)]
INFLATED_DURATION = 1.128
# `pytest test_s.py::test_sleep` alone, the test sleeping 0.4 s, pinned to CPU 0 (wall, CPU):
# as reported, and with a conftest halving report.duration (0.200 s reported).
ALONE = [(0.779, 0.376), (0.813, 0.410), (0.698, 0.294), (0.653, 0.253)]
HALVED = [(0.915, 0.419), (0.822, 0.380), (0.798, 0.372), (0.710, 0.264)]


def with_workers(runs: list[Run], workers: int | None) -> list[Run]:
    for each in runs:
        each.test_workers = workers
    return runs


def xdist(recorded, duration: float, workers: int | None) -> list[Run]:
    tests = {f"test_x.py::test_sleep[{i}]": duration for i in range(6)}
    return with_workers([run(wall, user_s=user, sys_s=sys, tests=tests) for wall, user, sys in recorded], workers)


def alone(recorded, duration: float, workers: int | None = 1, **kwargs) -> list[Run]:
    runs = [run(wall, user_s=cpu, tests={SLEEPS: duration}, **kwargs) for wall, cpu in recorded]
    return with_workers(runs, workers)


def check(built: Job) -> list:
    return timing_disagrees.check(RuleContext(built, LIMITS))


def test_the_rule_runs_with_the_others():
    assert timing_disagrees.check in RULES


def test_two_xdist_workers_may_report_more_than_the_wall_time():
    # 3.006 s of durations in a 2.16-2.20 s run: more than one process could take, well
    # within two.
    assert check(job({"cpuset=0-1": xdist(XDIST_RUNS, XDIST_DURATION, workers=2)})) == []
    # Unknown workers (a command whose -n could not be read): the sum is not judged.
    assert check(job({"cpuset=0-1": xdist(XDIST_RUNS, XDIST_DURATION, workers=None)})) == []


def test_the_same_durations_from_one_process_cannot_be():
    [finding] = check(job({"cpuset=0-1": xdist(XDIST_RUNS, XDIST_DURATION, workers=1)}))
    assert finding.test_id is None and finding.severity == "medium" and finding.config_label == "cpuset=0-1"
    metrics = finding.metrics
    assert isinstance(metrics, TimingDisagreesMetrics) and metrics.direction == "over" and metrics.workers == 1
    assert metrics.reported_s == pytest.approx(3.006)
    bound = 2.165 * (1 + LIMITS.timing_disagrees_over_share) + 6 * 0.0005
    assert metrics.bound_s == pytest.approx(bound) and metrics.gap_s == pytest.approx(3.006 - bound)
    assert metrics.ratio == pytest.approx(3.006 / bound)
    assert len(metrics.runs) == 3
    assert "more than 1 process(es) could take" in finding.title


def test_durations_inflated_past_two_workers_are_found_on_the_command():
    # 6.77 s reported in a 2.19 s median run: 2.3 s past two workers' time (1.47x).
    [finding] = check(job({"cpuset=0-1": xdist(INFLATED_RUNS, INFLATED_DURATION, workers=2)}))
    metrics = finding.metrics
    assert isinstance(metrics, TimingDisagreesMetrics) and finding.test_id is None
    assert metrics.workers == 2 and metrics.reported_s == pytest.approx(6.768)
    assert metrics.gap_s == pytest.approx(6.768 - (2 * 2.19 * 1.05 + 0.003))
    assert "report.duration" in finding.detail


def test_a_test_longer_than_its_whole_run_is_found_on_the_test_whatever_the_workers():
    # The conftest multiplying by 3 in the workers and the controller: 4.51 s a test, in
    # 2.04-2.20 s runs. No worker count makes a test outlast its run; the command's
    # finding over the same runs would only repeat it.
    tests = {f"test_x.py::test_sleep[{i}]": 4.51 for i in range(6)}
    runs = with_workers([run(wall, user_s=0.7, tests=tests) for wall in (2.199, 2.067, 2.041)], None)
    found = check(job({"cpuset=0-1": runs}))
    assert sorted(f.test_id for f in found) == sorted(tests)
    assert {f.metrics.direction for f in found} == {"over"}
    assert found[0].metrics.gap_s == pytest.approx(4.51 - 2.067 - 0.0005)


def test_a_test_run_alone_as_reported_agrees_with_the_timer():
    assert check(job({"cpuset=0": alone(ALONE, 0.401)})) == []


def test_a_halved_test_run_alone_disagrees_with_the_timer():
    [finding] = check(job({"cpuset=0": alone(HALVED, 0.200)}))
    assert finding.test_id == SLEEPS and finding.config_label == "cpuset=0" and finding.severity == "medium"
    metrics = finding.metrics
    assert isinstance(metrics, TimingDisagreesMetrics) and metrics.direction == "under"
    # Medians of the four runs: the gaps 0.296, 0.242, 0.226, 0.246 s; the ratios
    # 1.48, 1.42, 1.40, 1.53 (the wall time over the duration plus the CPU time).
    assert metrics.gap_s == pytest.approx((0.242 + 0.246) / 2, abs=1e-3)
    assert metrics.ratio == pytest.approx((0.822 / 0.580 + 0.915 / 0.619) / 2)
    assert metrics.reported_s == 0.2 and metrics.cpu_s == pytest.approx((0.372 + 0.380) / 2)
    assert "0.200 s run alone" in finding.title and "0.244 s" in finding.title
    # Its stored numbers read back as its kind's model.
    assert metrics_of("timing_disagrees", metrics.stored()) == metrics


@pytest.mark.parametrize(("margin", "found"), [(-0.005, False), (0.005, True)])
def test_the_floor_in_seconds(margin, found):
    # A long run alone whose ratio is small: the seconds decide.
    floor = LIMITS.timing_disagrees_min_s
    wall = 0.3 + 0.1 + floor + margin
    assert bool(check(job({"cpuset=0": alone([(wall, 0.1)] * 3, 0.3)}))) is found


@pytest.mark.parametrize(("margin", "found"), [(-0.01, False), (0.01, True)])
def test_the_ratio(margin, found):
    # A run of 2 s explained: 0.3 s more is past the floor, and the ratio decides.
    ratio = LIMITS.timing_disagrees_under_ratio + margin
    assert bool(check(job({"cpuset=0": alone([(2.0 * ratio, 0.5)] * 3, 1.5)}))) is found


def test_one_disturbed_run_of_three_does_not_make_a_finding():
    # The median of the configuration's runs: one run that waited outside its test (the
    # machine, not the conftest) is outvoted.
    runs = alone([ALONE[0], ALONE[1], (1.4, 0.376)], 0.401)
    assert check(job({"cpuset=0": runs})) == []


def test_a_quota_and_a_busy_neighbour_stretch_the_start_up():
    # Under cpus=0.5 the 0.3 s of start-up takes 0.6 s and may meet one throttling pause:
    # a 1 s test reported as such agrees, reported as 0.5 s it does not (a 0.4 s test
    # halved there, 1.21x, stays under the ratio: the quota's stretch dilutes it).
    wall = 1.0 + 0.3 / 0.5 + THROTTLE_PAUSE_S
    assert check(job({"cpus=0.5": alone([(wall, 0.3)] * 3, 1.0)}, cpus={"cpus=0.5": 0.5})) == []
    assert check(job({"cpus=0.5": alone([(wall, 0.3)] * 3, 0.5)}, cpus={"cpus=0.5": 0.5}))
    # Beside a process busy on its CPU all along, its 0.3 s of computing took 0.6 s.
    assert check(job({"cpuset=0": alone([(1.0, 0.3)] * 3, 0.4, foreign_cpus=1.0)})) == []
    assert check(job({"cpuset=0": alone([(1.0, 0.3)] * 3, 0.4)}))


# `pytest test_suite.py::test_sleeps` alone (a 0.6 s sleep) pinned to CPU 0 beside two busy
# loops pinned there too (7 Dec 2026): wall, CPU time, foreign_cpus and the kernel's
# run-queue delay of three runs, each reporting 0.605-0.612 s. The busy core's average
# (0.78-0.81 CPUs) says the run waited at most 0.8x its CPU time; it waited 2x.
BEHIND_TWO = [(1.538, 0.313, 0.79, 0.624), (1.727, 0.375, 0.78, 0.750), (1.349, 0.251, 0.81, 0.496)]


def test_a_run_queued_behind_two_busy_processes_agrees_by_the_kernels_wait():
    def runs(delays: bool) -> list[Run]:
        return with_workers(
            [
                run(
                    wall, user_s=cpu, tests={SLEEPS: 0.605}, foreign_cpus=foreign, run_delay_s=delay if delays else None
                )
                for wall, cpu, foreign, delay in BEHIND_TWO
            ],
            1,
        )

    assert check(job({"cpuset=0": runs(delays=True)})) == []
    # Without the kernel's count, the average busy CPUs leave 0.29-0.45 s unexplained.
    assert check(job({"cpuset=0": runs(delays=False)}))
    # A conftest taking 0.4 s off is still found behind them: the wait does not cover it
    # (0.3 s off, 1.24x in the median run, stays under the ratio the start-up's noise needs).
    shortened = with_workers(
        [run(wall, user_s=cpu, tests={SLEEPS: 0.2}, foreign_cpus=f, run_delay_s=d) for wall, cpu, f, d in BEHIND_TWO], 1
    )
    [finding] = check(job({"cpuset=0": shortened}))
    assert isinstance(finding.metrics, TimingDisagreesMetrics) and finding.metrics.direction == "under"
    assert finding.metrics.gap_s == pytest.approx(0.4, abs=0.02)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"workers": 2},  # xdist: the workers' start-up is no CPU time of the test's run alone
        {"workers": None},
        {"workers": 1, "kind": RunKind.warmup},  # a cold page cache
        {"workers": 1, "kind": RunKind.disturbed},  # a busy neighbour's
        {"workers": 1, "kind": RunKind.evidence, "probe": "strace"},  # a tracer's
    ],
)
def test_runs_a_test_alone_is_not_judged_in(kwargs):
    assert check(job({"cpuset=0": alone(HALVED, 0.200, **kwargs)})) == []


def test_the_worst_configuration_is_named_once_per_test():
    found = check(job({"cpuset=0": alone(HALVED, 0.200), "cpuset=0-1": alone([(1.2, 0.4)] * 3, 0.2)}))
    assert [(f.test_id, f.config_label) for f in found] == [(SLEEPS, "cpuset=0-1")]
