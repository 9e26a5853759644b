"""The gate: the suite run once, each test judged against its stored history, and only
what moved measured further (docs/explanations/cost-model.md, the gate).

A matrix job runs every test in every configuration, several times: about 4x the suite's
own time, mostly to learn that nothing changed. A gate job runs the head's suite once in
the gate configuration (the widest: no quota, the most CPUs), and compares each test's
run with the runs finished jobs stored of it there (services/jobs/history.py: the
same command, the base branch, the same node class). Per test:

- a run inside its history stops there: ``unchanged`` (services/measure/sequential.py
  ``goes_on``);
- a run outside it is judged on more runs, narrowed to the tests still undecided, one
  look at a time, by a rule that stays valid however often it looks (``judge``), with
  the false discovery rate held over the tests judged (Benjamini-Hochberg on the
  sequential p-values): ``regressed``, ``improved``, ``unchanged`` (the interval inside
  the change ratio both ways), or ``too_noisy`` after the last look;
- a test with too short a history to ever be judged is ``new`` (no stored run at all,
  or fewer than a single extreme run could stand out from); a failing test is
  ``failed``.

The tests that regressed, are new or failed go on to the matrix: every configuration,
narrowed to them, with the screen, the drill and the rules of a matrix job. A test with a
finding in the previous job is checked first: one run in each other configuration its
findings name, each against its history there. Where every run sits inside, nothing
about it changed: its
findings on its own latency are carried over (the evidence stays the earlier job's) and it
is not screened or drilled again; where one does not, it goes on. tests/bench/bench_gate.py
measures the rule's false alarms, power and runs per test; tests/bench/bench_gate_jobs.py a
gate job's cost.
"""

from __future__ import annotations

import math
import re
import shutil
import statistics
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.diagnose import change_points, triage
from services.diagnose.findings import fingerprint, format_seconds, graded
from services.diagnose.metrics import SlowerThanBaseMetrics
from services.errors import BadInput
from services.jobs import shards
from services.jobs.history import History, calibrations, reference_jobs, stored_runs
from services.jobs.node_class import NodeClass
from services.jobs.report_schema import ReportGate, judged_runs
from services.measure import budget, pytest_command
from services.measure.executors import Executor
from services.measure.runs import run_once
from services.measure.screen import warm_wrapping
from services.measure.sequential import DIFFERENT, SAME, Judgement, SequentialRule, goes_on, judge
from services.measure.stats import benjamini_hochberg
from services.measure.survey import flagged_before, previous_job
from services.models import Evidence, Finding, Job, JobConfig, JobKind, JobSource, RunKind
from services.thresholds import Thresholds

REGRESSED, IMPROVED, UNCHANGED, TOO_NOISY, NEW, FAILED = (
    "regressed",
    "improved",
    "unchanged",
    "too_noisy",
    "new",
    "failed",
)
# What goes on to the matrix: what moved the wrong way, what nothing can be said of, and
# what failed (the matrix's rules name why).
GOES_ON = (REGRESSED, NEW, FAILED)
# A regression against history is the pull request's kind of finding: the same problem
# (one fingerprint per test), triaged once, and failing the check run as a regression.
FINDING_KIND = "slower_than_base"
# Findings that compare a test with its past (a base, a change point) are about one
# change: a later job inside its history has none. Every other kind is about the test's
# own latency and holds while its runs do.
COMPARISON_KINDS = (FINDING_KIND, change_points.KIND)
# The node's own speed, apart from any project's code: a fixed CPU-bound loop (about
# 0.2 s of CPU here), timed in every job a gate may compare with. History measured on a
# node that has since slowed or sped up (another clock, another CPU behind the same model
# name, a throttled virtual machine) would turn each test's run into a regression or an
# improvement; a project's change cannot move it. Its CPU time is compared, not its wall
# time: a busy neighbour delays the loop but does not make its work larger (neighbours
# are screen.py's disturbed runs).
CALIBRATION = ("python3", "-c", "n = 0\nfor i in range(1_500_000):\n    n += i % 7\n")
# Runs of the loop per job, of which the least CPU time counts: interference only adds
# time. One run's CPU time varied 0.24-0.44 s on a quiet 2-core VM here (45 runs, 20 %
# beyond the drift ratio), so a single run declined about one gate in five on an unchanged
# node (tests/cli/test_gate.py failed 3 times in 9); the least of three stayed in
# 0.24-0.29 s (15 triples).
CALIBRATION_RUNS = 3
DRIFT_REFERENCE = 3


class GateDeclined(Exception):
    """The gate cannot judge this job against history (the reason, as the job's note says
    it): every configuration is screened instead, as a matrix job would."""


# The sentence a carried finding's detail ends its prose with (``_carry``).
CARRIED = re.compile(r" \(measured in job (\d+); .*\)$")


@dataclass
class GateTest:
    """One test's verdict against its history, with what it rests on."""

    test: str
    verdict: str
    stored: int  # the stored runs it was compared with
    jobs: list[int]  # the finished jobs they came from, newest first
    fresh_s: list[float]  # the gate's run, then each look's
    stored_median_s: float | None = None
    ratio: float | None = None  # fresh over stored (Hodges-Lehmann), where judged
    ratio_low: float | None = None
    ratio_high: float | None = None
    p_slower: float | None = None
    p_faster: float | None = None
    went_on: bool = False  # measured further in the matrix
    # A test with findings in the previous job: its one run in each other configuration,
    # and the job whose findings it carries when each sat inside its history there.
    checked_s: dict[str, float] = field(default_factory=dict)
    carried_from: int | None = None


@dataclass
class GateResult:
    config: str
    branch: str | None  # the history's branch (None: `lagtrace run` jobs, which have none)
    min_stored: int
    tests: list[GateTest] = field(default_factory=list)

    def going_on(self) -> list[str]:
        return [test.test for test in self.tests if test.went_on]

    def as_json(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "branch": self.branch,
            "min_stored": self.min_stored,
            "tests": [asdict(test) for test in self.tests],
        }


def rule_of(thresholds: Thresholds) -> SequentialRule:
    """The rule a gate judges with: a move under the pull request's change ratio is no
    change worth a verdict (as tests/bench/bench_gate.py simulates it)."""
    return SequentialRule(change_ratio=thresholds.base_change_ratio)


def min_stored(rule: SequentialRule) -> int:
    """The fewest stored runs against which one run can stand out: the slowest of h + 1
    runs has p = 1 / (h + 1), which must reach ``continue_p``. With fewer, every run
    would sit "inside" its history, and a 10x regression would pass as unchanged."""
    return math.ceil(1 / rule.continue_p - 1e-9) - 1


def gate_config(job: Job) -> JobConfig | None:
    """The widest configuration without a quota: the most CPUs (no CPU set: all of the
    node's); None where every configuration has a quota."""
    config = budget.widest(job)
    return config if config is not None and config.cpus is None else None


def history_branch(session: Session, job: Job, default_branches: list[str]) -> str | None:
    """Where a test's history comes from: a pull request's base branch; the branch pushed
    when it is one the project keeps history on (a push to main is judged against main),
    else the first of those; None for jobs without a source (`lagtrace run`), whose
    history is such jobs'."""
    source = session.get(JobSource, job.id)
    if source is None:
        return None
    if source.base_ref:
        return source.base_ref.removeprefix("refs/heads/")
    pushed = source.branch or (source.ref or "").removeprefix("refs/heads/")
    return pushed if pushed in default_branches else (default_branches[0] if default_branches else pushed)


def run_gate(
    session: Session,
    job: Job,
    executor: Executor,
    thresholds: Thresholds,
    *,
    workdir: Path,
    branch: str | None,
    progress: Callable[[str], None],
    checkpoint: Callable[[], None],
) -> GateResult:
    """The gate's runs and verdicts; GateDeclined where it cannot judge (not a pytest
    command, every configuration under a quota, a node unlike its history's, or a run that
    reported no test): the matrix then screens the whole suite as it would without a gate."""
    config = gate_config(job)
    if config is None:
        raise GateDeclined("every configuration has a CPU quota; the gate runs without one")
    if not pytest_command.is_pytest(job.command):
        raise GateDeclined("not a pytest command, whose tests it could compare one by one")
    rule = rule_of(thresholds)
    node = NodeClass.of_job(job)
    scratch = Path(tempfile.mkdtemp(prefix=f"lagtrace-gate{job.id}-"))
    try:

        def measure(
            command: list[str], look: int, where: JobConfig = config, warm: bool = False
        ) -> dict[str, tuple[str, float]]:
            run_dir = scratch / f"gate-{where.id}-{look}"
            run_dir.mkdir()
            try:
                measured = run_once(
                    session,
                    executor,
                    where,
                    command=command,
                    workdir=workdir,
                    run_dir=run_dir,
                    timeout_s=job.timeout_s,
                    kind=RunKind.gate,
                    repetition=look,
                    # A narrowed process runs its tests warm: its one-time cost is no test's.
                    wrapping=warm_wrapping(executor, run_dir) if look > 0 or warm else None,
                )
            finally:
                # Read: nothing of it is kept, and a step holds one run's directory at a
                # time (services/measure/executors/scratch.py).
                shutil.rmtree(run_dir, ignore_errors=True)
            checkpoint()
            return {case.test_id: (case.outcome, case.duration_s) for case in measured.cases}

        def history_in(where: JobConfig, test_ids: list[str]) -> dict[str, History]:
            return stored_runs(
                session,
                project_id=job.project_id,
                command=list(job.command),
                branch=branch,
                node=node,
                config_label=where.label,
                test_ids=test_ids,
                thresholds=thresholds,
            )

        try:
            _check_drift(session, job, config, branch, node, thresholds)
            drifted = False
        except GateDeclined:
            drifted = True
        screened = measure(job.command, 0)
        if drifted:
            # A neighbour's burst can outlast the job's first runs of the loop (on a clean
            # clone, tests/cli/test_gate.py's gate declined at 1.44x its history, 29 Nov
            # 2026, and again after three more runs straight after them, 7 Dec 2026): three
            # more runs once the suite's run is over, the least of all counting, before the
            # gate declines. Its run is the matrix's history either way, as a declined
            # gate's matrix runs are.
            calibrate(session, job, executor, workdir=workdir, first=CALIBRATION_RUNS)
            _check_drift(session, job, config, branch, node, thresholds)
        if not screened:
            raise GateDeclined("its run reported no test")
        histories = history_in(config, list(screened))
        result = GateResult(config.label, branch, min_stored(rule))
        judged: dict[str, GateTest] = {}
        for test_id, (outcome, seconds) in screened.items():
            history = histories.get(test_id, History())
            test = GateTest(test_id, UNCHANGED, len(history.durations), list(history.job_ids), [seconds])
            test.stored_median_s = statistics.median(history.durations) if history.durations else None
            result.tests.append(test)
            if outcome not in ("passed", "skipped"):
                test.verdict = FAILED
            elif outcome == "skipped":
                continue
            elif len(history.durations) < result.min_stored:
                test.verdict = NEW
            elif goes_on(history.durations, seconds, rule, seed=job.screen_seed or 0):
                judged[test_id] = test
        progress(
            f"gate: {len(screened)} tests run once in {config.label}; {len(judged)} outside their history, "
            f"{sum(t.verdict == NEW for t in result.tests)} new"
        )
        _judge(judged, _look(list(judged), histories, rule, thresholds, job, workdir, measure, progress))
        for test in result.tests:
            test.went_on = test.verdict in GOES_ON
        before = flagged_before(session, job)
        flagged = [test for test in result.tests if test.test in before and not test.went_on]
        if flagged:
            _check_flagged(session, job, config, flagged, rule, thresholds, workdir, measure, history_in, progress)
        return result
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def screened(job: Job, workdir: Path) -> Job:
    """The job as the matrix after its gate screens it, and so as the drill traces it:
    narrowed to the tests that went on where only some did, else the job itself (the
    whole command where all went on or the gate declined). Drilling the whole suite for
    one test's move would cost the suite's time once per probe, and snapshot tests that
    never moved."""
    gate = stored_gate(job)
    going_on = [test.test for test in gate.tests if test.went_on] if gate is not None else []
    if job.kind is not JobKind.gate or gate is None or not going_on or len(going_on) == len(gate.tests):
        return job
    ceiling = pytest_command.search_ceiling(job.executor)
    return shards.narrowed(job, pytest_command.narrow_to_tests(job.command, going_on, workdir, ceiling))


def calibrate(session: Session, job: Job, executor: Executor, *, workdir: Path, first: int = 0) -> None:
    """Time the calibration loop CALIBRATION_RUNS times in the gate configuration, in every
    job a gate could compare with (a matrix job's runs are the history's record of the node
    as much as a gate's); ``first``: the first run's repetition number."""
    config = gate_config(job)
    if config is None or not pytest_command.is_pytest(job.command):
        return  # no gate will ever read it
    run_dir = Path(tempfile.mkdtemp(prefix=f"lagtrace-calibration{job.id}-"))
    try:
        for repetition in range(first, first + CALIBRATION_RUNS):
            run_once(
                session,
                executor,
                config,
                command=list(CALIBRATION),
                workdir=workdir,
                run_dir=run_dir,
                timeout_s=60.0,
                kind=RunKind.calibration,
                repetition=repetition,
            )
    except BadInput:
        pass  # no python3 where the command runs: the job goes on, its gates without a drift check
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def _check_drift(
    session: Session, job: Job, config: JobConfig, branch: str | None, node: NodeClass, thresholds: Thresholds
) -> None:
    """Decline where this job's calibration (the least CPU time of its runs) took beyond
    ``gate_drift_ratio`` of the median of the history's (at least DRIFT_REFERENCE jobs'
    calibrations: the least of a few runs of the loop varies a few per cent, where a
    test's run may vary by its whole duration)."""
    fresh = [
        run.user_s + run.sys_s
        for run in config.runs
        if run.kind is RunKind.calibration and run.exit_code == 0 and not run.timed_out
    ]
    if not fresh:
        return  # not timed (no python3 where the command runs): nothing learnt of the node
    jobs = reference_jobs(
        session, project_id=job.project_id, command=list(job.command), branch=branch, node=node, thresholds=thresholds
    )
    stored = calibrations(session, jobs, config.label)
    if len(stored.durations) < DRIFT_REFERENCE:
        return
    median = statistics.median(stored.durations)
    cpu_s = min(fresh)
    ratio = cpu_s / median if median > 0 else 1.0
    if not 1 / thresholds.gate_drift_ratio <= ratio <= thresholds.gate_drift_ratio:
        raise GateDeclined(
            f"this node ran the calibration loop on {format_seconds(cpu_s)} of CPU, {ratio:.2f}x the "
            f"{format_seconds(median)} it took in the {len(stored.job_ids)} jobs of the history "
            f"(beyond {thresholds.gate_drift_ratio:g}x either way): the node is not the one the history measured"
        )


def _measure_in(
    measure: Callable[..., dict[str, tuple[str, float]]], where: JobConfig, command: list[str], look: int
) -> dict[str, tuple[str, float]]:
    """A look in another configuration than the gate's: warm, as every narrowed run."""
    return measure(command, look, where, True)


def _check_flagged(
    session: Session,
    job: Job,
    config: JobConfig,
    flagged: list[GateTest],
    rule: SequentialRule,
    thresholds: Thresholds,
    workdir: Path,
    measure: Callable[..., dict[str, tuple[str, float]]],
    history_in: Callable[[JobConfig, list[str]], dict[str, History]],
    progress: Callable[[str], None],
) -> None:
    """The tests with findings in the previous job, run once in each other configuration
    those findings name (``named_configs``): a test whose run sits inside its history in
    every one, or whose looks there find it unchanged, carries its findings on (what made
    them has not moved); one that moved or failed goes on, and one with too short a
    history in any goes on without a run. Its one run is history, like the gate's run of
    the suite: a test is chosen for this run by its past, never by this run's duration;
    the looks' runs are not."""
    ceiling = pytest_command.search_ceiling(job.executor)
    ids = [test.test for test in flagged]
    previous = previous_job(session, job)
    others = [other for other in job.configs if other.id != config.id]
    named = named_configs(session, previous, ids, [where.label for where in job.configs])
    histories_in = {where.id: history_in(where, ids) for where in others}
    # A test with too short a history in a configuration it is checked in goes on whatever
    # its runs show: it is not run to learn that (its matrix runs are history from then
    # on). Nor is one that moved in an earlier configuration run in the later ones.
    moved = {
        test_id
        for test_id in ids
        if any(
            len(histories_in[where.id].get(test_id, History()).durations) < min_stored(rule)
            for where in others
            if where.label in named[test_id]
        )
    }
    for where in others:
        histories = histories_in[where.id]
        checked = [test for test in flagged if test.test not in moved and where.label in named[test.test]]
        if not checked:
            continue
        # Warmed, as the focused runs most of its history there come from: a cold run left
        # that history and cost five looks (tests/bench/bench_gate_jobs.py: 9.3x the suite
        # against 3.55x warmed, one run each).
        narrowed = pytest_command.narrow_to_tests(job.command, [test.test for test in checked], workdir, ceiling)
        ran = measure(narrowed, 0, where, True)
        outside: list[str] = []
        for test in checked:
            outcome, seconds = ran.get(test.test, ("missing", 0.0))
            history = histories.get(test.test, History())
            if outcome == "passed":
                test.checked_s[where.label] = seconds
            if outcome != "passed":
                moved.add(test.test)
            elif goes_on(history.durations, seconds, rule, seed=job.screen_seed or 0):
                outside.append(test.test)
        if outside:
            # Judged as the gate configuration's runs are: a test flagged for its spread
            # (latency_flaky) lands outside its history by chance more often than most.
            looks = _look(
                outside,
                histories,
                rule,
                thresholds,
                job,
                workdir,
                partial(_measure_in, measure, where),
                progress,
            )
            moved |= {test_id for test_id in outside if looks.verdict(test_id) != UNCHANGED}
    # Only findings on a test's own latency carry: a comparison's was about one change.
    carried = (
        set(
            session.scalars(
                select(Finding.test_id).where(
                    Finding.job_id == previous.id, Finding.test_id.in_(ids), Finding.kind.not_in(COMPARISON_KINDS)
                )
            )
        )
        if previous is not None
        else set()
    )
    for test in flagged:
        test.went_on = test.test in moved
        if not test.went_on and test.test in carried and previous is not None:
            test.carried_from = previous.id
    progress(
        f"gate: {len(flagged)} tests with findings in the previous job checked in the configurations those "
        f"findings name; {len(moved)} moved and go on"
    )


def named_configs(
    session: Session, previous: Job | None, test_ids: list[str], labels: list[str]
) -> dict[str, set[str]]:
    """Per test, the configurations its findings in the previous job rest on: each
    finding's own, the slow and the fast configuration a comparison names (cpu_sensitivity's
    metrics, services/diagnose/metrics.py ConfigMedian), and those its evidence ran in (a
    cause rule compares the slow side's evidence with the fast side's). A run elsewhere
    tells nothing about them: a test flagged for its spread with cpuset=0 needs no run
    with cpus=0.5, where a CPU-bound test takes twice as long. A finding that names no
    configuration of this job rests on all of them."""
    named: dict[str, set[str]] = {test_id: set() for test_id in test_ids}
    if previous is None:
        return {test_id: set(labels) for test_id in test_ids}
    findings = session.scalars(select(Finding).where(Finding.job_id == previous.id, Finding.test_id.in_(test_ids)))
    for finding in findings:
        rests_on: set[str | None] = {finding.config_label} | {
            side["config"]
            for side in (finding.metrics.get("slow"), finding.metrics.get("fast"))
            if isinstance(side, dict) and isinstance(side.get("config"), str)
        }
        evidence_ids = [item for item in finding.evidence_ids if isinstance(item, int)]
        if evidence_ids:
            rests_on |= {
                evidence.config.label
                for evidence in session.scalars(select(Evidence).where(Evidence.id.in_(evidence_ids)))
                if evidence.config is not None
            }
        if finding.test_id in named:
            named[finding.test_id] |= {label for label in labels if label in rests_on} or set(labels)
    return {test_id: found or set(labels) for test_id, found in named.items()}


@dataclass
class Looks:
    """What the looks at some tests in one configuration concluded: each test's fresh
    runs, its last judgement, and the tests Benjamini-Hochberg found slower or faster."""

    fresh: dict[str, list[float]]
    verdicts: dict[str, Judgement]
    slower: set[str]
    faster: set[str]

    def verdict(self, test_id: str) -> str:
        judgement = self.verdicts.get(test_id)
        if judgement is None:
            return TOO_NOISY  # it never passed again
        if judgement.verdict == DIFFERENT and judgement.slower and test_id in self.slower:
            return REGRESSED
        if judgement.verdict == DIFFERENT and not judgement.slower and test_id in self.faster:
            return IMPROVED
        return UNCHANGED if judgement.verdict == SAME else TOO_NOISY


def _look(
    test_ids: list[str],
    histories: dict[str, History],
    rule: SequentialRule,
    thresholds: Thresholds,
    job: Job,
    workdir: Path,
    measure: Callable[[list[str], int], dict[str, tuple[str, float]]],
    progress: Callable[[str], None],
) -> Looks:
    """Looks on the tests outside their history, narrowed to those still open, until each
    is SAME, or DIFFERENT with Benjamini-Hochberg over every test judged agreeing, or the
    rule's last look. A test DIFFERENT on its own but not yet among BH's discoveries runs
    again: its sequential p-value can only fall."""
    looks = Looks({test_id: [] for test_id in test_ids}, {}, set(), set())
    q = thresholds.cpu_sensitivity_fdr

    def settled(test_id: str) -> bool:
        judgement = looks.verdicts.get(test_id)
        if judgement is None:
            return False
        if judgement.verdict == DIFFERENT:
            return test_id in (looks.slower if judgement.slower else looks.faster)
        return judgement.verdict == SAME

    open_tests = list(test_ids)
    ceiling = pytest_command.search_ceiling(job.executor)
    look = 0
    while open_tests and look < rule.looks:
        look += 1
        ran = measure(pytest_command.narrow_to_tests(job.command, open_tests, workdir, ceiling), look)
        for test_id in open_tests:
            outcome, seconds = ran.get(test_id, ("missing", 0.0))
            if outcome == "passed":
                looks.fresh[test_id].append(seconds)
            if looks.fresh[test_id]:
                looks.verdicts[test_id] = judge(
                    histories[test_id].durations, looks.fresh[test_id], rule, seed=job.screen_seed or 0
                )
        looks.slower = benjamini_hochberg({t: v.p_slower for t, v in looks.verdicts.items()}, q)
        looks.faster = benjamini_hochberg({t: v.p_faster for t, v in looks.verdicts.items()}, q)
        open_tests = [test_id for test_id in open_tests if not settled(test_id)]
        progress(f"gate: look {look}: {len(test_ids) - len(open_tests)} of {len(test_ids)} decided")
    return looks


def _judge(judged: dict[str, GateTest], looks: Looks) -> None:
    """Each test's verdict in the gate configuration from its looks."""
    for test_id, test in judged.items():
        test.fresh_s += looks.fresh[test_id]
        test.verdict = looks.verdict(test_id)
        judgement = looks.verdicts.get(test_id)
        if judgement is not None:
            test.ratio, test.ratio_low, test.ratio_high = judgement.ratio, judgement.ratio_low, judgement.ratio_high
            test.p_slower, test.p_faster = judgement.p_slower, judgement.p_faster


def stored_gate(job: Job) -> ReportGate | None:
    """The job's gate as stored (``GateResult.as_json``), read into the report's model with
    each verdict counted; None: not a gate, or one that could not judge. The stored JSON is
    read here only: the report (services/jobs/report.py) and record_findings take the model."""
    if not job.gate:
        return None
    # Gates stored before flagged tests were checked in every configuration checked none;
    # the defaults are given, not left to the model, so the report's JSON holds both keys.
    tests = [{"checked_s": {}, "carried_from": None, **test} for test in job.gate["tests"]]
    gate = ReportGate.model_validate({**job.gate, "tests": tests, "counts": {}})
    for test in gate.tests:
        gate.counts[test.verdict] = gate.counts.get(test.verdict, 0) + 1
    return gate


def record_findings(session: Session, job: Job, thresholds: Thresholds) -> None:
    """A slower_than_base finding per test the gate found regressed, and the findings the
    tests checked in every configuration carry on (after the rules, which replace the
    job's findings: services/diagnose/diagnose.py)."""
    gate = stored_gate(job)
    if gate is None:
        return
    # A test sent on that the budget then left out of the matrix has no verdict here; what
    # an earlier job measured of it still stands, or it would vanish from every later
    # gate, which carries from this job (tests/services/jobs/test_gate_carry.py).
    left_out = set(budget.left_out_tests(job))
    previous = previous_job(session, job) if left_out else None
    for test in gate.tests:
        if test.carried_from:
            _carry(session, job, test.test, test.carried_from, _sat_inside(gate.config, test.fresh_s, test.checked_s))
        elif test.went_on and test.test in left_out and previous is not None:
            _carry(session, job, test.test, previous.id, LEFT_OUT)
    where = f"the {gate.branch} branch's" if gate.branch else "earlier `lagtrace run` jobs'"
    for test in gate.tests:
        if test.verdict != REGRESSED or test.ratio is None or test.stored_median_s is None:
            continue
        ratio, fresh = test.ratio, judged_runs(test.fresh_s)
        interval = f"interval {test.ratio_low:.2f} to {test.ratio_high:.2f}; " if test.ratio_low is not None else ""
        finding = Finding(
            job=job,
            kind=FINDING_KIND,
            severity=graded(ratio, thresholds.regression_medium_ratio, thresholds.regression_high_ratio),
            title=f"{test.test} is {ratio:.1f}x slower than in {where} stored runs",
            detail=(
                f"median {format_seconds(statistics.median(fresh))} in {len(fresh)} fresh runs against "
                f"{format_seconds(test.stored_median_s)} in {test.stored} stored runs of {len(test.jobs)} "
                f"jobs with {gate.config} ({interval}sequential rank test p={test.p_slower:.2g})"
            ),
            config_label=gate.config,
            test_id=test.test,
            metrics=SlowerThanBaseMetrics(
                ratio=ratio,
                ratio_low=test.ratio_low,
                ratio_high=test.ratio_high,
                base_median_s=test.stored_median_s,
                head_median_s=statistics.median(fresh),
                p_value=test.p_slower,
                base_commit=None,
            ).stored(),
            evidence_ids=[],
            fingerprint=fingerprint(job.project.name, FINDING_KIND, test.test),
        )
        triage.carry(session, finding)
        session.add(finding)
    session.flush()


LEFT_OUT = "this gate sent it on, but the budget left it out of the reruns, so it was not measured again"


def _sat_inside(config: str, fresh_s: list[float], checked_s: Mapping[str, float]) -> str:
    runs = {config: fresh_s[0], **checked_s} if fresh_s else dict(checked_s)
    listed = ", ".join(f"{format_seconds(seconds)} with {label}" for label, seconds in runs.items())
    return (
        f"this gate's runs of it ({listed}) sat inside its history in each configuration its findings name: "
        "not measured again"
    )


def _carry(session: Session, job: Job, test_id: str, earlier: int, why: str) -> None:
    """The earlier job's findings on the test's own latency, found again here: the same
    problem (fingerprint and triage), its numbers and evidence the earlier job's. ``why``
    says why this job did not measure it; a kind this job's rules found anew is not carried."""
    found_here = set(session.scalars(select(Finding.kind).where(Finding.job_id == job.id, Finding.test_id == test_id)))
    for found in session.scalars(
        select(Finding).where(Finding.job_id == earlier, Finding.test_id == test_id).order_by(Finding.id)
    ):
        if found.kind in COMPARISON_KINDS or found.kind in found_here:
            continue
        prose, *output = found.detail.split("\n")
        # Carried again and again, a finding names the job that measured it.
        before = CARRIED.search(prose)
        measured_in = int(before[1]) if before else earlier
        prose = prose[: before.start()] if before else prose
        carried = Finding(
            job=job,
            kind=found.kind,
            severity=found.severity,
            title=found.title,
            detail="\n".join(
                [
                    f"{prose} (measured in job {measured_in}; {why})",
                    *output,
                ]
            ),
            config_label=found.config_label,
            test_id=test_id,
            metrics=dict(found.metrics),
            evidence_ids=[],
            fingerprint=found.fingerprint,
        )
        triage.carry(session, carried)
        session.add(carried)
