"""What the drill traces when the timing screen flagged nothing."""

from __future__ import annotations

from pathlib import Path

from services.jobs.drill_targets import drill_targets
from services.settings import Settings
from tests.support import jobs


def _targets(walls: list[float], cpu_share: float, sys_part: float):
    built = jobs.job()
    for config in built.configs:
        for run in jobs.timing_runs(config, walls, cpu_share=cpu_share):
            run.sys_s = run.wall_s * sys_part
            run.user_s = run.wall_s * (cpu_share - sys_part)
    return drill_targets(built, Settings(), Path("."))


def test_a_command_that_lives_in_the_kernel_is_drilled():
    # 300,000 recv(1): 0.21 s, half of it system time.
    [target] = _targets([0.21, 0.22, 0.21, 0.2, 0.21], cpu_share=1.0, sys_part=0.5)
    assert target.test_id is None


def test_a_command_slow_in_every_configuration_is_drilled():
    assert len(_targets([1.5, 1.52, 1.49, 1.5, 1.51], cpu_share=0.9, sys_part=0.02)) == 1


def test_a_short_healthy_command_is_not_drilled():
    assert _targets([0.05, 0.05, 0.051, 0.05, 0.049], cpu_share=0.9, sys_part=0.3) == []


def test_a_suite_with_many_flagged_tests_drills_the_most_severe_first_and_names_the_rest():
    built = jobs.job(["python", "-m", "pytest", "-q", "tests"])
    # Eight tests slower on two cores, the last in the suite far more than the others.
    fast = {f"t.py::test_{i}": 0.1 for i in range(8)}
    slow = {**{f"t.py::test_{i}": 0.25 for i in range(7)}, "t.py::test_7": 2.0}
    jobs.timing_runs(built.configs[0], [2.0] * 5, tests=fast)
    jobs.timing_runs(built.configs[1], [3.0] * 5, tests=slow)
    left_out: list[str] = []
    targets = drill_targets(built, Settings(), Path("."), left_out)
    drilled = [target.test_id for target in targets]
    assert len(drilled) == Settings().thresholds.drill_max_tests == 5
    assert drilled[0] == "t.py::test_7"  # high before low, whatever the suite's order
    assert len(left_out) == 3 and not set(left_out) & set(drilled)


def test_the_note_on_a_drill_with_nothing_to_trace_says_what_happened():
    from services.measure.drill import NO_TARGETS, no_targets
    from services.models import RunKind
    from tests.unit.jobs import job, run

    # Every run failed: nothing was found because nothing was measured, not "the screen found nothing".
    failed = job({"a": [run(0.1, exit_code=2) for _ in range(3)], "b": [run(0.1, exit_code=2)]})
    assert "no timing run of the command succeeded" in no_targets(failed)
    assert "found nothing" not in no_targets(failed)
    # A pull request: its change against the base is a comparison, no drill was asked for it.
    pull_request = job({"a": [run(0.1) for _ in range(5)] + [run(0.2, kind=RunKind.base) for _ in range(5)]})
    assert "comparing the two" in no_targets(pull_request) and "found nothing" not in no_targets(pull_request)
    # A job screened healthy says so.
    assert no_targets(job({"a": [run(0.1) for _ in range(5)], "b": [run(0.1) for _ in range(5)]})) == NO_TARGETS
