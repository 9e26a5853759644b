"""The forecast of a job's cost (services/jobs/forecast.py) on plans and recorded numbers."""

from __future__ import annotations

import datetime as dt

import pytest

from services.jobs import forecast
from services.jobs.forecast import Past
from services.models import Job, JobConfig, JobKind, JobStatus, Run, RunKind, TestResult
from services.thresholds import Thresholds

T = Thresholds()
START = dt.datetime(2026, 12, 7, 12, 0, tzinfo=dt.UTC)
MATRIX = [("cpuset=0", None, "0"), ("cpuset=0-1", None, "0-1"), ("cpus=0.5", 0.5, None)]


def job_of(command: list[str], *, repeat: int = 5, kind: JobKind = JobKind.matrix, probes=None) -> Job:
    job = Job(
        id=7,
        project_id=1,
        command=command,
        executor="local",
        repeat=repeat,
        kind=kind,
        status=JobStatus.running,
        probes=probes,
        budget_s=None,
        created_at=START,
        notes=[],
    )
    job.configs = [
        JobConfig(position=i, label=label, cpus=cpus, cpuset=cpuset) for i, (label, cpus, cpuset) in enumerate(MATRIX)
    ]
    return job


def add_run(job: Job, label: str, kind: RunKind, wall: float, cpu: float, tests: int = 0, repetition: int = 0) -> Run:
    config = next(c for c in job.configs if c.label == label)
    run = Run(
        config=config,
        kind=kind,
        repetition=repetition,
        wall_s=wall,
        user_s=cpu,
        sys_s=0.0,
        exit_code=0,
        timed_out=False,
        test_results=[
            TestResult(test_id=f"t{i}", duration_s=wall * 0.9 / tests, outcome="passed") for i in range(tests)
        ],
    )
    return run


def test_before_any_run_without_history_it_is_unknown():
    made = forecast.predict(job_of(["python", "prog.py"]), T, [])
    assert made.total_s is None and made.basis == "unknown"
    assert forecast.sentence(made, 0.0) == "predicted cost unknown until the suite's first run"


def test_before_any_run_the_same_commands_finished_jobs_say_it():
    made = forecast.predict(job_of(["python", "prog.py"]), T, [Past(30.0, 5.0), Past(40.0, 5.0), Past(35.0, 6.0)])
    assert made.basis == "history"
    assert made.total_s == 35.0 and made.suite_s == 5.0 and made.ratio == 7.0


def test_a_quota_stretches_a_cpu_bound_run_and_spare_cpus_do_not_shorten_it():
    job = job_of(["python", "prog.py"])
    first = add_run(job, "cpuset=0-1", RunKind.warmup, wall=2.0, cpu=2.0)  # one CPU busy
    whole = forecast.whole_run_s(job, first)
    assert whole == {"cpuset=0": 2.0, "cpuset=0-1": 2.0, "cpus=0.5": pytest.approx(4.0)}
    # Two CPUs busy: one core takes twice as long, half a core four times.
    parallel = add_run(job_of(["x"]), "cpuset=0-1", RunKind.warmup, wall=2.0, cpu=4.0)
    assert forecast.stretch(parallel, 1.0) == 2.0 and forecast.stretch(parallel, 0.5) == 4.0
    # A run that waits (a sleep) is stretched by no quota.
    waiting = add_run(job_of(["x"]), "cpuset=0-1", RunKind.warmup, wall=2.0, cpu=0.1)
    assert forecast.stretch(waiting, 0.5) == 1.0


def test_after_the_first_run_a_whole_command_is_its_rounds_and_its_drill():
    job = job_of(["python", "prog.py"], repeat=5)
    add_run(job, "cpuset=0-1", RunKind.warmup, wall=1.0, cpu=1.0)
    made = forecast.predict(job, T, [], now=START + dt.timedelta(seconds=3))
    # Left: two first runs (1 s, 2 s), 5 rounds of 1 + 1 + 2 s, 4 evidence runs in the
    # slowest (2 s) and the fastest (1 s) configuration; a toll a run and the end's.
    runs = [1.0, 2.0] + [1.0, 1.0, 2.0] * 5 + [2.0] * 4 + [1.0] * 4
    expected = 3 + sum(runs) + forecast.TOLL_S * len(runs) + forecast.FINISH_S
    assert made.basis == "first run" and made.suite_s == 1.0
    assert made.total_s == pytest.approx(expected)
    assert made.left_s(3.0) == pytest.approx(expected - 3)


def test_without_a_drill_no_evidence_runs_are_predicted():
    with_drill = job_of(["python", "prog.py"], repeat=3)
    without = job_of(["python", "prog.py"], repeat=3, probes=[])
    for job in (with_drill, without):
        add_run(job, "cpuset=0-1", RunKind.warmup, wall=1.0, cpu=1.0)
    now = START + dt.timedelta(seconds=2)
    gap = forecast.predict(with_drill, T, [], now).total_s - forecast.predict(without, T, [], now).total_s
    assert gap == pytest.approx(8 * 1.5 + 8 * forecast.TOLL_S)


def test_as_it_goes_the_runs_so_far_replace_the_plan():
    job = job_of(["python", "prog.py"], repeat=5, probes=[])
    for label, wall in (("cpuset=0-1", 1.0), ("cpuset=0", 1.0), ("cpus=0.5", 2.0)):
        add_run(job, label, RunKind.warmup, wall=wall, cpu=wall if label != "cpus=0.5" else 1.0)
    # The first round done: each timing run of cpus=0.5 took 3 s, not the 2 s predicted.
    for rep in (1, 2):
        for label, wall in (("cpuset=0-1", 1.0), ("cpuset=0", 1.0), ("cpus=0.5", 3.0)):
            add_run(job, label, RunKind.timing, wall=wall, cpu=1.0, repetition=rep)
    made = forecast.predict(job, T, [], now=START + dt.timedelta(seconds=20))
    runs = [1.0, 1.0, 3.0] * 3
    assert made.total_s == pytest.approx(20 + sum(runs) + forecast.TOLL_S * len(runs) + forecast.FINISH_S)


def test_a_surveyed_suite_reruns_a_share_of_its_tests_and_drills_a_few():
    job = job_of(["python", "-m", "pytest", "-q"], repeat=5)
    add_run(job, "cpuset=0-1", RunKind.survey, wall=10.0, cpu=10.0, tests=40)  # start-up 1 s
    made = forecast.predict(job, T, [], now=START + dt.timedelta(seconds=12), startup_s=1.0)
    # Left: the survey's two other runs (10 s, 20 s); 2 focused rounds of each configuration's
    # start-up and a tenth of its tests; the drill at 0.4x the suite.
    focus = [1.0 + 0.1 * 9.0, 1.0 + 0.1 * 9.0, 2.0 + 0.1 * 18.0] * 2
    runs = [10.0, 20.0, *focus, 4.0]
    assert made.total_s == pytest.approx(12 + sum(runs) + forecast.TOLL_S * len(runs) + forecast.FINISH_S)
    assert 4 < made.ratio < 7  # a first matrix job: several times its suite


def test_the_budget_caps_what_is_left():
    job = job_of(["python", "prog.py"], repeat=5)
    job.budget_s = 10.0
    add_run(job, "cpuset=0-1", RunKind.warmup, wall=4.0, cpu=4.0)
    made = forecast.predict(job, T, [], now=START + dt.timedelta(seconds=5))
    assert made.total_s < 5 + 6.0 + 40 * forecast.TOLL_S + forecast.FINISH_S + 1e-9


def test_a_gate_costs_a_matrix_until_the_command_has_finished_gates():
    first = job_of(["python", "-m", "pytest"], kind=JobKind.gate)
    add_run(first, "cpuset=0-1", RunKind.gate, wall=10.0, cpu=10.0, tests=40)
    alone = forecast.predict(first, T, [], now=START + dt.timedelta(seconds=11), startup_s=1.0)
    assert alone.ratio > 4  # its run, then the whole matrix
    held = forecast.predict(first, T, [Past(14.0, 10.0), Past(12.0, 10.0)], now=START + dt.timedelta(seconds=11))
    assert held.total_s == pytest.approx(13.0)


def test_update_stores_the_latest_and_keeps_the_first_made_from_a_run():
    job = job_of(["python", "prog.py"], repeat=3, probes=[])
    job.predicted_s = job.first_predicted_s = None
    forecast.update(job, T, [Past(50.0, 5.0)], now=START)
    assert job.predicted_s == 50.0 and job.first_predicted_s is None and job.predicted_at == START
    add_run(job, "cpuset=0-1", RunKind.warmup, wall=1.0, cpu=1.0)
    forecast.update(job, T, [], now=START + dt.timedelta(seconds=2))
    first = job.first_predicted_s
    assert first is not None and job.predicted_s == first
    add_run(job, "cpuset=0", RunKind.warmup, wall=5.0, cpu=1.0)
    forecast.update(job, T, [], now=START + dt.timedelta(seconds=8))
    assert job.first_predicted_s == first and job.predicted_s > first
