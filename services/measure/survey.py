"""The survey: which tests of a pytest suite of real size the focused screen reruns (docs/explanations/cost-model.md).

Screening a suite whole, 6 times in each of 3 configurations, cost 20 times the suite's
own time before any evidence was taken, though most tests cannot hold a finding. So for
a suite of at least ``focus_min_tests`` tests the screen's first round (one whole-suite
run per configuration, the runs that used to be the warm-up) is a survey. A test goes on
to the focused screen when that round shows what a finding would need:

- a failure or an error in any configuration, or no result in one;
- a ratio: its slowest configuration ``survey_ratio`` times its fastest, at least
  ``cpu_sensitivity_min_s`` apart (below that floor no cpu_sensitivity verdict is
  possible, however many runs). Against a configuration with a CPU quota the time to beat
  is what the quota alone explains, as in cpu_sensitivity (and against one pinned to
  fewer CPUs than the command kept busy, what the lost cores explain): a quota's share of
  a slowdown is physics, and would otherwise send every test that computes on;
- a run at or past ``--stall-after``;
- a finding in the project's previous job of the same command: one run per configuration
  clears a test that is slow in half its runs a quarter of the time (all three runs in
  one mode), and a finding once made is worth its reruns until it is gone;
- a duration as far from the previous job's survey of it as two modes (``spread_since``):
  a bimodal test that one survey missed is kept by the next one 7 times in 8.

``survey_ratio`` is well below ``cpu_sensitivity_ratio``: one run per configuration is
noisy, and a test sent on needlessly costs a few reruns, while a test cleared wrongly is
a lost finding. Every other test is cleared: one run per configuration is its whole cost.
The focused screen reruns the survivors together, in the suite's own order, in one pytest
process per run, under the same statistics as a whole screen (services/measure/screen.py).
"""

from __future__ import annotations

import math
from collections import defaultdict

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.measure.cgroups import THROTTLE_PAUSE_S
from services.measure.configs import parse_cpulist
from services.models import Finding, Job, JobConfig, JobStatus, Run, RunKind, TestResult
from services.thresholds import Thresholds

PASSED = ("passed", "skipped")


def survey_tests(runs: dict[str, Run]) -> list[str]:
    """Every test id the survey's runs reported, in the order of the first run that holds most."""
    ordered = max(runs.values(), key=lambda run: len(run.test_results), default=None)
    ids = [result.test_id for result in ordered.test_results] if ordered else []
    others = [r.test_id for run in runs.values() for r in run.test_results]
    return list(dict.fromkeys([*ids, *others]))


def previous_job(session: Session, job: Job) -> Job | None:
    """The project's latest finished job of the same command before ``job``: what its
    tests cost (shard balancing) and which of them it flagged (the survey). ``job`` may be
    a shard's view of it, whose command is narrowed to the shard's tests: the command
    compared is the job's own, as stored."""
    own = session.get(Job, job.id)
    command = own.command if own is not None else job.command
    candidates = session.scalars(
        select(Job)
        .where(Job.project_id == job.project_id, Job.id < job.id, Job.status == JobStatus.done)
        .order_by(Job.id.desc())
        .limit(20)
    )
    return next((other for other in candidates if other.command == command), None)


def flagged_before(session: Session, job: Job) -> set[str]:
    """The tests with a finding in the previous job of the same command (any kind: each is
    about the test's latency or its outcome)."""
    previous = previous_job(session, job)
    if previous is None:
        return set()
    found = session.scalars(select(Finding.test_id).where(Finding.job_id == previous.id, Finding.test_id.is_not(None)))
    return {test_id for test_id in found if test_id}


def spread_since(session: Session, job: Job, runs: dict[str, Run], thresholds: Thresholds) -> set[str]:
    """The tests whose survey duration in a configuration, beside their survey durations in
    the previous job of the same command, lie as far apart as two modes of one latency
    (``spread_out``). A test slow in half its runs escapes one survey a quarter of the
    time (its three runs in one mode); with the previous survey's three beside them, one
    time in 32. Surveys only: a narrowed rerun pays its session's set-up in other tests."""
    previous = previous_job(session, job)
    if previous is None:
        return set()
    rows = session.execute(
        select(TestResult.test_id, JobConfig.label, TestResult.duration_s)
        .join(Run, TestResult.run_id == Run.id)
        .join(JobConfig, Run.config_id == JobConfig.id)
        .where(JobConfig.job_id == previous.id, Run.kind == RunKind.survey, TestResult.outcome == "passed")
    ).all()
    before: dict[tuple[str, str], list[float]] = defaultdict(list)
    for test_id, label, duration in rows:
        before[(test_id, label)].append(duration)
    return {
        result.test_id
        for label, run in runs.items()
        for result in run.test_results
        if result.outcome == "passed"
        and (result.test_id, label) in before
        and spread_out([*before[(result.test_id, label)], result.duration_s], thresholds)
    }


def candidates(
    runs: dict[str, Run], configs: list[JobConfig], thresholds: Thresholds, stall_after_s: float | None = None
) -> list[str]:
    """The tests the survey (``runs``: one whole-suite run per configuration label) cannot clear,
    in suite order."""
    return list(suspicion(runs, configs, thresholds, stall_after_s))


# The suspicion of a test that failed, went missing in a configuration or stalled: above
# any ratio, so a budget keeps it first.
CERTAIN = math.inf


def suspicion(
    runs: dict[str, Run],
    configs: list[JobConfig],
    thresholds: Thresholds,
    stall_after_s: float | None = None,
    flagged: set[str] | frozenset[str] = frozenset(),
    tracer_s: dict[str, dict[str, float]] | None = None,
) -> dict[str, float]:
    """The tests the survey cannot clear, in suite order, each with how suspicious it looks:
    CERTAIN for a failure, a missing result or a stall, else its slowest configuration over
    the time to beat (what a quota or lost cores explain), at least ``survey_ratio`` for a
    test ``flagged``: by the previous job (flagged_before), or slowed by the census's tracer
    in the survey (survey_census.SurveyCensus.perturbed). A budget reruns the most suspicious first.
    ``tracer_s``: per configuration label, what a tracer added to each test's duration
    (the census's run), taken off before it is judged."""
    quotas = {config.label: config.cpus for config in configs if config.cpus is not None}
    pinned = {config.label: len(parse_cpulist(config.cpuset)) for config in configs if config.cpuset}
    durations: dict[str, dict[str, float]] = defaultdict(dict)
    troubled: set[str] = set()
    for label, run in runs.items():
        for result in run.test_results:
            if result.outcome not in PASSED:
                troubled.add(result.test_id)
            elif result.outcome == "passed":
                added = (tracer_s or {}).get(label, {}).get(result.test_id, 0.0)
                durations[result.test_id][label] = max(0.0, result.duration_s - added)
    kept: dict[str, float] = {}
    shares = _cpu_shares(runs)
    for test_id in survey_tests(runs):
        per_config = durations.get(test_id, {})
        if (
            test_id in troubled
            or (per_config and len(per_config) < len(runs))
            or (per_config and stall_after_s is not None and max(per_config.values()) >= stall_after_s)
        ):
            kept[test_id] = CERTAIN
        elif per_config:
            stretch = _stretch(per_config, quotas, pinned, shares, thresholds)
            if stretch is not None or test_id in flagged:
                kept[test_id] = max(stretch or 0.0, thresholds.survey_ratio if test_id in flagged else 0.0)
    return kept


def _cpu_shares(runs: dict[str, Run]) -> dict[str, float]:
    """The CPUs each survey run kept busy: a test's own CPU time is unknown, so its
    command's stands in for it (as in cpu_sensitivity)."""
    return {label: ((run.user_s or 0.0) + (run.sys_s or 0.0)) / run.wall_s for label, run in runs.items() if run.wall_s}


def _stretch(
    per_config: dict[str, float],
    quotas: dict[str, float],
    pinned: dict[str, int],
    shares: dict[str, float],
    thresholds: Thresholds,
) -> float | None:
    """The largest ratio of a configuration to its time to beat (cpu_sensitivity.slowdowns)
    among those survey_ratio x that time or more; None: nothing stretched."""
    fast = min(per_config, key=per_config.__getitem__)
    fast_s, share = per_config[fast], shares.get(fast)
    found: float | None = None
    for label, value in per_config.items():
        expected = fast_s
        if label in quotas and share is not None:
            expected = fast_s * max(1.0, share / quotas[label]) + THROTTLE_PAUSE_S
        elif label in pinned and share is not None:
            expected = fast_s * max(1.0, share / pinned[label])
        if value >= thresholds.survey_ratio * expected and value - fast_s >= thresholds.cpu_sensitivity_min_s:
            ratio = value / expected if expected > 0 else CERTAIN
            found = ratio if found is None else max(found, ratio)
    return found


def cleared_in_rounds(
    rounds: list[dict[str, Run]],
    configs: list[JobConfig],
    thresholds: Thresholds,
    tests: list[str],
    survey: dict[str, Run] | None = None,
) -> list[str]:
    """Of ``tests`` (kept by the survey), those that every focused round so far (``rounds``:
    one narrowed run per configuration label each) clears by the survey's own rule, and
    whose runs in no configuration (the ``survey``'s among them) lie as far apart as two
    modes of one latency would (latency_flaky's gap). A test the survey kept on one noisy
    run, then cleared twice, is noise: its further rounds would cost minutes of a suite of
    real size and decide nothing."""
    kept: set[str] = set()
    values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for runs in rounds:
        kept |= set(suspicion(runs, configs, thresholds))
        # A round that has no result of a test says nothing for it.
        kept |= set(tests) - set(survey_tests(runs))
    for runs in [*rounds, survey or {}]:
        for label, run in runs.items():
            for result in run.test_results:
                if result.outcome == "passed":
                    values[result.test_id][label].append(result.duration_s)
    return [
        test_id
        for test_id in tests
        if test_id not in kept and not any(spread_out(series, thresholds) for series in values[test_id].values())
    ]


def spread_out(values: list[float], thresholds: Thresholds) -> bool:
    """Runs as far apart as two modes of one latency (latency_flaky's gap and spread)."""
    low, high = min(values), max(values)
    return high >= thresholds.flaky_gap_ratio * low and high - low >= thresholds.flaky_min_spread_s
