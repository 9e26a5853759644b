"""A gate's reference: a test's stored runs in one configuration, on the base branch, from
finished matrix jobs on the same node class, newest first, at most N, none too old
(services/jobs/history.py), on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt

import pytest

from services.jobs import lifecycle
from services.jobs.history import calibrations, reference_jobs, stored_runs
from services.jobs.node_class import NodeClass
from services.measure.configs import CpuConfig
from services.measure.pytest_command import TestCase
from services.measure.runs import store_run
from services.models import Job, JobKind, JobSource, JobStatus, RunKind
from services.thresholds import Thresholds
from tests.support.branch_history import _result

NOW = dt.datetime(2026, 11, 28, 12, 0, tzinfo=dt.UTC)
NODE = NodeClass("Intel(R) Xeon(R) CPU @ 2.20GHz", "0-1", "lagtrace-runner:latest")
TEST, OTHER = "tests/test_shop.py::test_checkout", "tests/test_shop.py::test_search"
WIDE, NARROW = "cpuset=0-1", "cpuset=0"
COMMAND = ["python3", "-m", "pytest"]


def stored_job(
    session,
    duration: float,
    *,
    days_ago: float = 1.0,
    project: str = "shop",
    ref: str | None = "refs/heads/main",
    branch: str | None = "main",
    trigger: str | None = "push",
    command: list[str] = COMMAND,
    source: bool = True,
    kind: JobKind = JobKind.matrix,
    status: JobStatus = JobStatus.done,
    node: NodeClass = NODE,
    runs: int = 1,
    outcome: str = "passed",
    run_kind: RunKind | None = None,
) -> Job:
    """A finished job whose runs in both configurations timed TEST at ``duration`` (plus
    the run's number in milliseconds, so the order of runs shows) and OTHER at 1 s: a
    survey and focused runs, or ``run_kind`` runs."""
    job = lifecycle.create_job(
        session,
        project=project,
        command=command,
        configs=[CpuConfig(WIDE, cpuset=(0, 1)), CpuConfig(NARROW, cpuset=(0,))],
        executor="docker",
        workdir=None,
        repeat=5,
        timeout_s=None,
        source="api",
        kind=kind,
    )
    job.trigger = trigger
    if source:
        session.add(
            JobSource(
                job_id=job.id, kind="git", repository_url="https://example.invalid/shop.git", ref=ref, branch=branch
            )
        )
    node.record(job)
    for config in job.configs:
        store_run(session, config, RunKind.warmup, 0, _result(9.0), [TestCase(TEST, 9.0, "passed")])
        for repetition in range(1, runs + 1):
            cases = [TestCase(TEST, duration + repetition / 1000, outcome), TestCase(OTHER, 1.0, "passed")]
            kind_of_run = run_kind or (RunKind.survey if repetition == 1 else RunKind.focus)
            store_run(session, config, kind_of_run, repetition, _result(2), cases)
    lifecycle.mark_finished(job, status)
    job.finished_at = NOW - dt.timedelta(days=days_ago)
    session.flush()
    return job


def history(session, project_id: int, thresholds: Thresholds | None = None, **given):
    asked = {
        "command": COMMAND,
        "branch": "main",
        "node": NODE,
        "config_label": WIDE,
        "test_ids": [TEST, OTHER],
        **given,
    }
    return stored_runs(session, project_id=project_id, thresholds=thresholds or Thresholds(), now=NOW, **asked)


def test_a_tests_history_is_its_newest_passed_runs_in_one_configuration_with_their_jobs(db_session):
    session = db_session
    oldest = stored_job(session, 0.100, days_ago=3, runs=2)
    newest = stored_job(session, 0.300, days_ago=1, runs=2)
    middle = stored_job(session, 0.200, days_ago=2, runs=1)
    found = history(session, newest.project_id)
    # Newest job first, within a job its last run first; the warm-ups (9 s) are never history.
    assert found[TEST].durations == pytest.approx([0.302, 0.301, 0.201, 0.102, 0.101])
    assert found[TEST].job_ids == [newest.id, middle.id, oldest.id]
    assert found[OTHER].durations == pytest.approx([1.0] * 5)
    # Another configuration is another history.
    narrow = history(session, newest.project_id, config_label=NARROW)
    assert narrow[TEST].durations == found[TEST].durations
    assert history(session, newest.project_id, config_label="cpus=0.5") == {}


def test_at_most_n_runs_and_none_older_than_the_limit(db_session):
    session = db_session
    jobs = [stored_job(session, 0.1 * (n + 1), days_ago=10 - n, runs=2) for n in range(5)]
    project = jobs[0].project_id
    capped = history(session, project, Thresholds(gate_history_runs=3))
    assert capped[TEST].durations == pytest.approx([0.502, 0.501, 0.402])
    assert capped[TEST].job_ids == [jobs[4].id, jobs[3].id]
    # 10 to 6 days ago; a limit of 8.5 days keeps the three newest jobs.
    recent = history(session, project, Thresholds(gate_history_max_age_days=8.5))
    assert recent[TEST].job_ids == [jobs[4].id, jobs[3].id, jobs[2].id]
    assert history(session, project, Thresholds(gate_history_max_age_days=1)) == {}


def test_only_finished_jobs_of_the_base_branch_on_the_same_node_class_are_history(db_session):
    session = db_session
    reference = stored_job(session, 0.1)
    project = reference.project_id
    # The pull request's head branch named by the trigger, and a ref that is main's only by name.
    stored_job(session, 0.9, branch="feature/slow-checkout")
    stored_job(session, 0.9, ref="refs/heads/feature", branch="feature")
    # Jobs that ran main's code but do not measure the branch as it is pushed: an API or
    # dashboard job given only a ref, a rerun in other configurations, a change point's
    # confirmation, and a fork's pull request whose head branch is also named main.
    stored_job(session, 0.9, branch=None, trigger="api")
    stored_job(session, 0.9, trigger="rerun")
    stored_job(session, 0.9, trigger="confirm")
    stored_job(session, 0.9, trigger="pull_request")
    stored_job(session, 0.9, kind=JobKind.gate, run_kind=RunKind.gate)  # a gate's own runs
    stored_job(session, 0.9, run_kind=RunKind.disturbed)
    stored_job(session, 0.9, status=JobStatus.failed)
    stored_job(session, 0.9, status=JobStatus.cancelled)
    stored_job(session, 0.9, project="another")
    stored_job(session, 0.9, node=NodeClass("AMD EPYC 7B13", NODE.engine_cpus, NODE.runner_image))
    stored_job(session, 0.9, node=NodeClass(NODE.cpu_model, "0-7", NODE.runner_image))
    stored_job(session, 0.9, node=NodeClass(NODE.cpu_model, NODE.engine_cpus, "team/runner:3.12"))
    stored_job(session, 0.9, node=NodeClass(NODE.cpu_model, NODE.engine_cpus, None))  # the local executor
    stored_job(session, 0.9, node=NodeClass(None, None, None))  # before 0025, or sharded
    stored_job(session, 0.9, outcome="failed")
    stored_job(session, 0.9, command=[*COMMAND, "-n", "2"])  # another command times tests otherwise
    stored_job(session, 0.9, source=False)  # `lagtrace run` on this machine: no branch
    found = history(session, project)
    assert found[TEST].durations == pytest.approx([0.101]) and found[TEST].job_ids == [reference.id]
    # A branch named by the trigger is that branch's history, a scheduled matrix's too.
    named = stored_job(session, 0.4, ref="refs/pull/7/head", branch="main")
    scheduled = stored_job(session, 0.5, days_ago=0.5, trigger="schedule")
    assert history(session, project)[TEST].job_ids == [scheduled.id, named.id, reference.id]
    # The local executor's runs are the history of local gates only.
    local = NodeClass(NODE.cpu_model, NODE.engine_cpus, None)
    assert history(session, project, node=local)[TEST].durations == pytest.approx([0.901])
    # A node whose class is unknown has no history, rather than every machine's.
    assert (
        reference_jobs(
            session,
            project_id=project,
            command=COMMAND,
            branch="main",
            node=NodeClass(None, "0-1", None),
            thresholds=Thresholds(),
        )
        == []
    )


def test_jobs_without_a_source_are_the_history_of_jobs_without_one(db_session):
    # `lagtrace run` stores no repository and no branch: its history is the project's
    # earlier `lagtrace run` jobs of the same command.
    session = db_session
    local = stored_job(session, 0.2, source=False)
    stored_job(session, 0.9)  # a push to main
    found = history(session, local.project_id, branch=None)
    assert found[TEST].job_ids == [local.id] and found[TEST].durations == pytest.approx([0.201])


def test_the_matrix_part_of_a_gate_is_history(db_session):
    # The tests a gate sent on were measured in every configuration, as a matrix measures
    # them: a test new on the branch has history from its first gate on.
    session = db_session
    gate = stored_job(session, 0.3, kind=JobKind.gate, runs=2)
    assert history(session, gate.project_id)[TEST].job_ids == [gate.id]


def test_a_gates_one_run_of_the_suite_is_history_and_its_later_runs_are_not(db_session):
    # Its first run times every test, as a survey does; the later ones only the tests
    # that ran outside their history.
    session = db_session
    gate = stored_job(session, 0.3, kind=JobKind.gate, run_kind=RunKind.gate, runs=3)
    [config] = [c for c in gate.configs if c.label == WIDE]
    store_run(session, config, RunKind.gate, 0, _result(2), [TestCase(TEST, 0.25, "passed")])
    session.flush()
    assert history(session, gate.project_id)[TEST].durations == pytest.approx([0.25])


def test_the_survey_run_the_census_traced_is_no_history(db_session):
    # Its tracer's time is in every duration (click's suite ran 3.2x slower under it):
    # a gate compared with it would take a 2x regression for a speed-up.
    session = db_session
    traced = stored_job(session, 0.3, runs=1)
    [config] = [c for c in traced.configs if c.label == WIDE]
    [survey] = [run for run in config.runs if run.kind is RunKind.survey]
    survey.probe = "census"
    untraced = stored_job(session, 0.2, runs=1, days_ago=2)
    session.flush()
    found = history(session, traced.project_id)
    assert found[TEST].job_ids == [untraced.id]
    assert found[TEST].durations == pytest.approx([0.201])


def test_a_jobs_calibration_is_the_least_cpu_time_of_its_runs_of_the_loop(db_session):
    """One run of the calibration loop took 0.25-0.41 s of CPU on a quiet VM here: the
    least of a job's runs is its calibration (interference only adds time), newest job first."""
    session = db_session
    older, newer = stored_job(session, 0.1, days_ago=2), stored_job(session, 0.1, days_ago=1)
    for job, cpu_times in ((older, [0.40, 0.26, 0.31]), (newer, [0.27, 0.41, 0.25])):
        wide = next(config for config in job.configs if config.label == WIDE)
        for repetition, cpu_s in enumerate(cpu_times):
            store_run(session, wide, RunKind.calibration, repetition, _result((cpu_s - 0.01) / 0.9), [])
    session.flush()
    found = calibrations(session, [newer.id, older.id], WIDE)
    assert found.job_ids == [newer.id, older.id]
    assert found.durations == pytest.approx([0.25, 0.26])
    assert calibrations(session, [newer.id, older.id], NARROW).durations == []
