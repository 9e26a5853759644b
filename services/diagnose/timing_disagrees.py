"""timing_disagrees: a run's reported test durations disagree with lagtrace's own timer.

A test's duration is the job's own number: the JUnit XML its pytest writes, which a
conftest can rewrite (halve ``report.duration`` in a ``pytest_runtest_logreport`` hook
or a ``pytest_runtest_makereport`` hookwrapper), and a test that got 2x slower would be
judged unchanged. The run's wall and CPU time are lagtrace's, measured outside the job
(services/measure/executors/), and they bound what the durations can say:

- over: one test takes no longer than its run, and a run's tests add up to at most its
  wall time once per process that ran them at once (pytest-xdist's ``-n``, read from
  the command and its configuration when the run was taken: Run.test_workers);
- under: a test run alone (one JUnit case, one process) takes its duration plus
  pytest's start-up and teardown, which compute: the run's CPU time (stretched by a
  quota, plus one throttling pause) and its wait for a CPU (the kernel's run-queue
  delay, or what the other processes busy on its CPUs account for) bound them, so the
  timer cannot see much more than the duration, the CPU time and the wait together.

A disagreement is no verdict: the timing verdicts stand on the reported durations, and
this finding says they cannot be trusted, by how much, in which runs. Judged on the
untraced runs that time the code under test (a tracer's own start-up is no pytest's),
the median of a configuration's runs, past a ratio and a floor in seconds
(services/thresholds.py timing_disagrees_*); one finding per test or command, the
configuration where they disagree most (docs/reference/findings.md).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from services.diagnose.context import RuleContext
from services.diagnose.findings import FindingDraft, Severity, format_seconds
from services.diagnose.metrics import TimingDisagreesMetrics
from services.measure.cgroups import THROTTLE_PAUSE_S
from services.measure.pytest_command import JUNIT_RESOLUTION_S
from services.models import JobConfig, Run, RunKind
from services.thresholds import Thresholds

KIND = "timing_disagrees"
# The runs whose durations time the code under test: the screen's, the survey's, the
# focused screen's and a gate's. Not a warm-up (a cold page cache is no pytest start-up
# that computes), a disturbed run (a busy neighbour's), the base commit's, or an evidence
# run (a tracer's).
JUDGED_KINDS = (RunKind.timing, RunKind.survey, RunKind.focus, RunKind.gate)
# over: the durations say more than the timer allows; under: less than it saw.
Direction = Literal["over", "under"]


@dataclass(frozen=True)
class _Look:
    """One run held against the timer."""

    run: Run
    reported_s: float
    cpu_s: float | None
    bound_s: float
    gap_s: float
    ratio: float


def check(context: RuleContext) -> list[FindingDraft]:
    limits = context.thresholds
    # subject (a test id; None: the command) -> (direction, configuration label) -> its looks
    looks: dict[str | None, dict[tuple[Direction, str], list[_Look]]] = {}
    for config in context.job.configs:
        for run in _judged(config):
            for subject, direction, look in _looks(run, config, limits):
                looks.setdefault(subject, {}).setdefault((direction, config.label), []).append(look)
    drafts = []
    for subject, by_side in looks.items():
        worst = None
        for (direction, label), judged in by_side.items():
            gap_s = statistics.median(look.gap_s for look in judged)
            ratio = statistics.median(look.ratio for look in judged)
            if _disagrees(gap_s, ratio, direction, limits) and (worst is None or gap_s > worst[3]):
                worst = (subject, direction, label, gap_s, ratio, judged)
        if worst is not None:
            drafts.append(_draft(*worst))
    # A test that outlasts its run makes the sum of that run's durations disagree too: the
    # test's finding says it, the command's would only repeat it.
    if any(
        d.test_id is not None and isinstance(d.metrics, TimingDisagreesMetrics) and d.metrics.direction == "over"
        for d in drafts
    ):
        drafts = [draft for draft in drafts if draft.test_id is not None]
    return drafts


def _judged(config: JobConfig) -> list[Run]:
    return [
        run
        for run in config.runs
        if run.kind in JUDGED_KINDS and not run.traced and not run.timed_out and run.test_results and run.wall_s > 0
    ]


def _looks(run: Run, config: JobConfig, limits: Thresholds) -> list[tuple[str | None, Direction, _Look]]:
    """What the run's durations say against its timer, per subject: each test longer than
    its whole run, the run's sum against its workers, a test run alone against its CPU time."""
    found: list[tuple[str | None, Direction, _Look]] = []
    wall = run.wall_s
    rounding = JUNIT_RESOLUTION_S / 2
    for result in run.test_results:
        # No test outlasts its run, whatever ran beside it.
        found.append((result.test_id, "over", _over(run, result.duration_s, wall, rounding, None)))
    if run.test_workers is not None and len(run.test_results) > 1:
        total = sum(result.duration_s for result in run.test_results)
        capacity = wall * run.test_workers
        found.append((None, "over", _over(run, total, capacity, rounding * len(run.test_results), limits)))
    if run.test_workers == 1 and len(run.test_results) == 1:
        [result] = run.test_results
        cpu_s = run.user_s + run.sys_s
        # Other processes busy on its CPUs stretch its computing: it waits its turn. The
        # kernel's count of that wait (Run.run_delay_s) where there is one, and never less
        # than the average busy CPUs (Run.foreign_cpus) account for: behind two busy
        # processes on one core a run waits twice its CPU time, while the average says at
        # most once. A quota stretches it by its factor, and its period may pause it once more.
        waited_s = max(cpu_s * run.foreign_cpus, run.run_delay_s or 0.0)
        quota = config.cpus
        startup_s = cpu_s / min(quota, 1.0) + THROTTLE_PAUSE_S if quota else cpu_s
        bound_s = result.duration_s + startup_s + waited_s
        gap_s = wall - bound_s
        ratio = wall / bound_s if bound_s > 0 else float("inf")
        found.append((result.test_id, "under", _Look(run, result.duration_s, cpu_s, bound_s, gap_s, ratio)))
    return found


def _over(run: Run, reported_s: float, capacity_s: float, rounding_s: float, limits: Thresholds | None) -> _Look:
    """The durations against the most the timer allows: a test's against its run's wall
    (no share: a test timed inside its run can only round past it), the sum against the
    wall times the workers (``limits``: pytest starts its clocks after lagtrace's)."""
    share = limits.timing_disagrees_over_share if limits is not None else 0.0
    bound_s = capacity_s * (1 + share) + rounding_s
    ratio = reported_s / bound_s if bound_s > 0 else float("inf")
    return _Look(run, reported_s, None, bound_s, reported_s - bound_s, ratio)


def _disagrees(gap_s: float, ratio: float, direction: Direction, limits: Thresholds) -> bool:
    if gap_s < limits.timing_disagrees_min_s:
        return False
    # Over, any ratio past the bound is impossible, the floor alone keeps rounding out;
    # under, the start-up's own noise scales with the run.
    return ratio > 1 if direction == "over" else ratio >= limits.timing_disagrees_under_ratio


def _median(looks: list[_Look], of: Callable[[_Look], float | None]) -> float | None:
    values = [value for value in map(of, looks) if value is not None]
    return statistics.median(values) if values else None


def _draft(
    subject: str | None, direction: Direction, label: str, gap_s: float, ratio: float, looks: list[_Look]
) -> FindingDraft:
    reported_s = _median(looks, lambda look: look.reported_s) or 0.0
    wall_s = _median(looks, lambda look: look.run.wall_s) or 0.0
    bound_s = _median(looks, lambda look: look.bound_s) or 0.0
    cpu_s = _median(looks, lambda look: look.cpu_s)
    workers = looks[0].run.test_workers
    runs = [look.run.id for look in looks]
    who = f"The test {subject}" if subject is not None else "The command"
    if direction == "under":
        title = (
            f"{who} reports {format_seconds(reported_s)} run alone, but lagtrace timed its run at "
            f"{format_seconds(wall_s)} with {label}: {format_seconds(gap_s)} its duration and CPU time do not explain"
        )
        what = (
            f"run alone with {label}, it reported {format_seconds(reported_s)} (median of {len(looks)} runs), "
            f"while lagtrace's timer saw {format_seconds(wall_s)} of wall time and {format_seconds(cpu_s or 0.0)} of "
            f"CPU time: pytest's start-up and teardown compute, so the run should take at most "
            f"{format_seconds(bound_s)}, and it took {format_seconds(gap_s)} ({ratio:.2f}x) more"
        )
        suspects = (
            "a conftest or plugin that shortens report.duration (a pytest_runtest_logreport hook, a "
            "pytest_runtest_makereport hookwrapper), or time spent waiting outside any test (a "
            "pytest_sessionstart or pytest_configure hook that sleeps)"
        )
    elif subject is not None:
        title = (
            f"{who} reports {format_seconds(reported_s)}, longer than its whole run as lagtrace timed it "
            f"({format_seconds(wall_s)} with {label})"
        )
        what = (
            f"with {label}, it reported {format_seconds(reported_s)} (median of {len(looks)} runs), "
            f"{format_seconds(gap_s)} ({ratio:.2f}x) past the {format_seconds(wall_s)} lagtrace's timer saw for the "
            f"whole run it ran in"
        )
        suspects = "a conftest or plugin that lengthens report.duration, or a clock the tests replace"
    else:
        title = (
            f"The command's tests report {format_seconds(reported_s)} in all, more than {workers} process(es) "
            f"could take in a {format_seconds(wall_s)} run with {label}"
        )
        what = (
            f"with {label}, its tests' durations add up to {format_seconds(reported_s)} (median of {len(looks)} "
            f"runs), {format_seconds(gap_s)} ({ratio:.2f}x) past {workers} worker(s) x the "
            f"{format_seconds(wall_s)} lagtrace's timer saw"
        )
        suspects = (
            "a conftest or plugin that lengthens report.duration, a clock the tests replace, or workers "
            "lagtrace did not read from the command and its configuration (pytest-xdist's -n)"
        )
    detail = (
        f"{what}. The reported durations are the job's own numbers (its JUnit XML); the timer is lagtrace's, "
        f"outside the job. Suspect {suspects}. The timing verdicts stand on the reported durations: read "
        f"them as the job's word. Runs: {', '.join(f'#{run}' for run in runs)}"
    )
    return FindingDraft(
        kind=KIND,
        # The job's numbers cannot be trusted: more than a note, no latency problem of its own.
        severity=Severity.medium,
        title=title,
        detail=detail,
        config_label=label,
        test_id=subject,
        metrics=TimingDisagreesMetrics(
            direction=direction,
            reported_s=reported_s,
            wall_s=wall_s,
            cpu_s=cpu_s,
            bound_s=bound_s,
            gap_s=gap_s,
            ratio=ratio,
            workers=workers,
            runs=runs,
        ),
    )
