"""The census's traced survey run is evidence, never timing: no configuration's table, test
median, cost unit or history comes from it; and the cost is the whole job's, created to
finished, beside its runs'."""

from __future__ import annotations

import datetime as dt

from services.jobs.report import build_report
from services.jobs.report_text import render_text
from services.measure import budget
from services.measure.samples import collect
from services.measure.survey_census import census_config
from services.models import Job, JobStatus, Project, RunKind
from tests.unit.jobs import job, run

CREATED = dt.datetime(2026, 12, 4, 12, 0, 0, tzinfo=dt.UTC)

TESTS = {f"t.py::test_{i}": 0.02 for i in range(30)}
# click's suite under the census's strace on two cores: 3.2x its untraced time.
TRACED = {test_id: seconds * 3.2 for test_id, seconds in TESTS.items()}


def _reportable(built: Job, took_s: float = 9.0) -> Job:
    """``built`` as a finished job of a project, ``took_s`` created to finished."""
    built.project = Project(name="owner/suite")
    built.created_at, built.finished_at = CREATED, CREATED + dt.timedelta(seconds=took_s)
    built.status = JobStatus.done
    return built


def _survey(tests: dict[str, float], *, probe: str | None = None):
    return run(sum(tests.values()) + 0.3, kind=RunKind.survey, repetition=0, tests=tests, probe=probe)


def _matrix(traced_label: str):
    """A surveyed suite whose survey run in ``traced_label`` the census traced."""
    configs = {}
    for label in ("cpuset=0", "cpuset=0-1", "cpus=0.5"):
        scale = 2.0 if label == "cpus=0.5" else 1.0
        tests = {test_id: seconds * scale for test_id, seconds in TESTS.items()}
        configs[label] = [
            _survey(TRACED if label == traced_label else tests, probe="census" if label == traced_label else None)
        ]
    built = job(configs, cpus={"cpus=0.5": 0.5}, cpusets={"cpuset=0": "0", "cpuset=0-1": "0-1"})
    built.command = ["python3", "-m", "pytest"]
    return _reportable(built)


def test_the_census_traces_the_fewest_cpus_without_a_quota_never_the_gates_configuration():
    built = _matrix("cpuset=0")
    assert census_config(built).label == "cpuset=0"
    # With one configuration free of quotas it is that one, gate or not.
    alone = job({"cpuset=0-1": [], "cpus=0.5": []}, cpus={"cpus=0.5": 0.5}, cpusets={"cpuset=0-1": "0-1"})
    assert census_config(alone).label == "cpuset=0-1"
    assert census_config(job({"cpus=0.5": []}, cpus={"cpus=0.5": 0.5})) is None


def test_a_traced_survey_run_is_in_no_configurations_figure_and_no_tests_median():
    built = _matrix("cpuset=0-1")
    samples = collect(built)
    assert samples.wall["cpuset=0-1"] == []
    assert samples.wall["cpuset=0"] == [sum(TESTS.values()) + 0.3]

    report = build_report(built)
    by_label = {config.label: config for config in report.configs}
    assert by_label["cpuset=0-1"].runs == [] and by_label["cpuset=0-1"].wall_s is None
    assert [r.wall_s for r in by_label["cpuset=0-1"].traced_runs] == [sum(TRACED.values()) + 0.3]
    assert by_label["cpuset=0"].traced_runs == [] and len(by_label["cpuset=0"].runs) == 1
    # The cleared tests show no duration of the traced run: "3.2x slower on two cores" is the tracer's.
    for test in report.tests:
        assert "cpuset=0-1" not in {c.label for c in test.configs}, test
    text = render_text(report)
    assert "cpuset=0-1: its survey run ran under the census's strace (sleeps and reads): 2.220 s" in text
    assert "2.5x the fastest untraced median, in no figure above" in text


def test_the_cost_is_against_the_untraced_median_with_the_most_cpus_and_the_whole_job_is_timed():
    built = _matrix("cpuset=0")
    suite = sum(TESTS.values()) + 0.3
    assert budget.untraced_suite_s(built) == (suite, "cpuset=0-1", False)
    report = build_report(built)
    spent = suite + (sum(TRACED.values()) + 0.3) + (2 * sum(TESTS.values()) + 0.3)
    assert report.budget.job_wall_s == 9.0
    assert report.budget.job_cost_ratio == round(9.0 / suite, 2)
    assert report.budget.cost_ratio == round(spent / suite, 2)
    assert report.budget.evidence_s == round(sum(TRACED.values()) + 0.3, 3)
    assert report.budget.own_s == round(9.0 - spent, 3)
    text = render_text(report)
    assert f"Cost: the job took 9.0 s, created to finished, {9.0 / suite:.1f}x the suite's own time" in text
    assert "the median of its untraced runs with cpuset=0-1" in text
    assert f"lagtrace's own time outside any run {9.0 - spent:.1f} s" in text


def test_a_job_whose_only_run_was_traced_says_its_unit_is_the_traced_run():
    built = job({"cpuset=0": [_survey(TRACED, probe="census")]}, cpusets={"cpuset=0": "0"})
    seconds, label, traced = budget.untraced_suite_s(built)
    assert (label, traced) == ("cpuset=0", True) and seconds == sum(TRACED.values()) + 0.3
    assert "its only run, traced by the census with cpuset=0" in render_text(build_report(_reportable(built, 4.0)))


def test_a_small_commands_unit_is_its_timing_runs_median_not_its_warm_up():
    warm = run(0.5, kind=RunKind.warmup, repetition=0)
    built = job({"cpuset=0": [warm, run(0.1), run(0.12), run(0.11)]}, cpusets={"cpuset=0": "0"})
    assert budget.untraced_suite_s(built) == (0.11, "cpuset=0", False)
    only_warm = job({"cpuset=0": [run(0.5, kind=RunKind.warmup, repetition=0)]})
    assert budget.untraced_suite_s(only_warm) == (0.5, "cpuset=0", False)
