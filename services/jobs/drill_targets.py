"""The drill's targets: what the screen's findings (and a surveyed suite's census) send to
the evidence runs, each in the two configurations its symptom compares."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

from services.diagnose import pairs
from services.diagnose.context import DrillPair, RuleContext
from services.diagnose.findings import SEVERITY_ORDER, Severity
from services.diagnose.symptoms import screen_findings
from services.measure import pytest_command
from services.measure.drill import Target
from services.measure.samples import ran_through, surveyed
from services.measure.stats import Summary, median_interval
from services.measure.survey_census import survey_census
from services.models import COMMAND_KINDS, Job, Run, RunKind
from services.settings import Settings


def drill_targets(
    job: Job, settings: Settings, workdir: Path, left_out: list[str] | None = None, suspects: Sequence[str] = ()
) -> list[Target]:
    """What the drill traces, each in the two configurations its symptom compares
    (services/diagnose/pairs.py): each test (pytest) that a timing rule flags; the whole
    command where it is itself the symptom: a plain program the timing rules flag, a
    hang, a stall past --stall-after, probes asked for by name, a pytest start-up problem,
    or a suite with no flagged test where only a tracer can tell (needs_tracer); and the
    tests a surveyed suite's census ``suspects`` of polling or tiny reads. Drilling a whole
    suite for what one test does costs the suite's time once per probe."""
    context = RuleContext(job, settings.thresholds)
    samples = context.samples
    wall = samples.wall_summaries()
    hung = not wall and bool(_walls_of(job, lambda run: run.timed_out))
    if hung:
        # Every run hit the timeout: no statistic, but where it hangs is what the drill's
        # last snapshot before the kill shows.
        wall = _walls_of(job, lambda run: run.timed_out)
    elif not wall and pytest_command.is_pytest(job.command) and _walls_of(job, ran_through):
        # A suite with a failing test exits 1 in every run, yet its passing tests were timed
        # (services/measure/samples.py ran_through): what the screen found among them is
        # drilled (tests/unit/services/measure/test_drill_failing_test.py).
        wall = _walls_of(job, ran_through)
    elif not wall and job.probes:
        # Every run failed, and evidence was asked for by name: trace the failing command.
        wall = _walls_of(job, lambda run: run.exit_code != 0)
    elif not wall and suspects:
        # A suite surveyed in one configuration, whose only run the census traced: no
        # untraced timing, yet what the census suspects is drilled. The traced run only
        # places the drill (its configuration); no verdict is taken from it
        # (tests/e2e/test_shards.py, a census per shard).
        wall = _walls_of(job, ran_through, traced=True)
    if not wall:
        return []
    flagged = screen_findings(context)
    seed = job.screen_seed or 0
    is_pytest = pytest_command.is_pytest(job.command)
    flagged_tests = list(dict.fromkeys(d.test_id for d in flagged if d.test_id is not None)) if is_pytest else []
    # The most severe first (a stable sort keeps the suite's order among equals); past
    # drill_max_tests the rest are named, not traced.
    worst = {t: min(SEVERITY_ORDER[d.severity] for d in flagged if d.test_id == t) for t in flagged_tests}
    flagged_tests.sort(key=worst.__getitem__)
    # Then the tests the census suspects (polling, tiny reads): no timing mark, a tracer's.
    flagged_tests += [test for test in suspects if test not in worst]
    if left_out is not None:
        left_out += flagged_tests[settings.thresholds.drill_max_tests :]
    flagged_tests = flagged_tests[: settings.thresholds.drill_max_tests]
    slowest = max(summary.median for summary in wall.values())
    command_findings = [draft for draft in flagged if draft.test_id is None]
    surveyed = any(run.kind is RunKind.survey for config in job.configs for run in config.runs)
    if flagged_tests or surveyed:
        # The tests carry the symptom; the command's own part is its start-up. A suite of
        # real size is never traced whole for what a tracer alone might see: each probe
        # would cost the whole suite's time again (docs/explanations/cost-model.md).
        command_flagged = any(
            draft.kind in COMMAND_SYMPTOMS and SEVERITY_ORDER[draft.severity] <= SEVERITY_ORDER[Severity.medium]
            for draft in command_findings
        )
    else:
        command_flagged = bool(command_findings) or needs_tracer(context, wall)
    stalled = job.stall_after_s is not None and slowest >= job.stall_after_s
    found: list[Target] = []
    if job.probes is not None or hung or stalled or command_flagged:
        pair = pairs.choose(samples, settings.thresholds, None, wall, flagged, seed)
        found.append(_target(None, list(job.command), wall, pair))
    for test_id in flagged_tests:
        narrowed = pytest_command.narrow_to_test(
            job.command, test_id, workdir, ceiling=pytest_command.search_ceiling(job.executor)
        )
        summaries = samples.test_summaries(test_id) if test_id in samples.tests else _survey_summaries(job, test_id)
        if not summaries and test_id in suspects:
            summaries = _survey_summaries(job, test_id, traced=True)
        if not summaries:
            continue
        pair = pairs.choose(samples, settings.thresholds, test_id, summaries, flagged, seed)
        found.append(_target(test_id, narrowed, summaries, pair))
    return found


def _target(test_id: str | None, command: list[str], summaries: dict[str, Summary], pair: DrillPair | None) -> Target:
    if pair is None:
        return Target(test_id, command, summaries)
    return Target(test_id, command, summaries, (pair.slow, pair.fast), compared=pair.compared)


def _survey_summaries(job: Job, test_id: str, traced: bool = False) -> dict[str, Summary]:
    """A test the survey cleared: its one duration per configuration (``traced``: the
    census's traced runs too, where there is no other)."""
    return {label: median_interval(values) for label, values in surveyed(job, traced).get(test_id, {}).items()}


def census_suspects(job: Job) -> list[str]:
    """What the survey's census sends to the drill (polling, tiny reads), shard by shard."""
    found: list[str] = []
    for evidence in sorted(survey_census(job), key=lambda e: (e.run.shard or 0) if e.run else 0):
        found += [test for test in evidence.content.get("suspects") or [] if test not in found]
    return found


# What the whole command of a suite with flagged tests is drilled for (medium or high):
# its own start-up.
COMMAND_SYMPTOMS = ("slow_startup",)


def needs_tracer(context: RuleContext, wall: dict[str, Summary]) -> bool:
    """Whether the whole command is drilled although no timing rule flagged it: slow in
    even its fastest configuration, or living in the kernel. Socket reads, a hot Python
    path and a blocked event loop leave no mark on the timing screen's numbers."""
    limits = context.thresholds
    if wall and min(summary.median for summary in wall.values()) >= limits.drill_slow_command_s:
        return True
    # 300,000 recv(1) take 0.2 s here, half of it system time, where a healthy Python
    # program spends a few per cent there.
    for config in context.job.configs:
        runs = [run for run in context.timing_runs(config) if run.wall_s > 0 and run.exit_code == 0]
        if not runs:
            continue
        sys_s = statistics.median(run.sys_s for run in runs)
        share = statistics.median(run.sys_s / run.wall_s for run in runs)
        if sys_s >= limits.drill_syscall_heavy_min_s and share >= limits.drill_syscall_heavy_share:
            return True
    return False


def _walls_of(job: Job, unsuccessful: Callable[[Run], bool], traced: bool = False) -> dict[str, Summary]:
    """Per configuration, the median interval of the timing runs that ``unsuccessful`` picks
    (``traced``: the census's traced runs too)."""
    walls = {
        config.label: [
            run.wall_s
            for run in config.runs
            if run.kind in COMMAND_KINDS and (traced or not run.traced) and unsuccessful(run)
        ]
        for config in job.configs
    }
    return {label: median_interval(values) for label, values in walls.items() if values}
