"""The report ``lagtrace.report/v1``, built from the database (its text rendering:
services/jobs/report_text.py)."""

from __future__ import annotations

import statistics

from services.diagnose import cpu_sensitivity, observer_effect
from services.diagnose import diagnoses as stories
from services.diagnose.context import RuleContext
from services.diagnose.findings import SEVERITY_ORDER
from services.diagnose.report_parts import ReportFinding
from services.evidence import ConfirmContent, EvidenceKind
from services.jobs import pull_requests
from services.jobs.gate import stored_gate
from services.jobs.report_schema import (
    SCHEMA_ID,
    BaseComparison,
    BudgetLeftOut,
    EvidenceNote,
    EvidenceRun,
    FailedRun,
    Interval,
    MeasuredOn,
    Report,
    ReportBudget,
    ReportConfig,
    ReportEvidence,
    ReportJob,
    ReportNodeClass,
    ReportRun,
    ReportSurvey,
    ReportTest,
    TestConfig,
)
from services.measure import budget as job_budget
from services.measure import hostload, nodelock
from services.measure.samples import collect, surveyed
from services.measure.stats import Summary, compare
from services.models import COMMAND_KINDS, Finding, Job, Run, RunKind
from services.thresholds import Thresholds

SCHEMA = SCHEMA_ID


def _interval(summary: Summary | None) -> Interval | None:
    if summary is None:
        return None
    return Interval(
        median=summary.median,
        ci_low=summary.ci_low,
        ci_high=summary.ci_high,
        n=summary.n,
        confidence=summary.confidence,
    )


def _runs(runs: list[Run]) -> list[ReportRun]:
    return [ReportRun.model_validate(run, from_attributes=True) for run in runs]


def _test_config(label: str, summary: Summary | None, runs: list[float]) -> TestConfig:
    """A test's durations in one configuration, with their interval where there is one (the
    fields are given only then: report_json leaves unset ones out, as the dict did)."""
    if summary is None:
        return TestConfig(label=label, runs=runs)
    return TestConfig(
        label=label,
        median=summary.median,
        ci_low=summary.ci_low,
        ci_high=summary.ci_high,
        n=summary.n,
        confidence=summary.confidence,
        runs=runs,
    )


def build_report(job: Job, thresholds: Thresholds | None = None) -> Report:
    """The v1 report, as the model it is read as inside services/ and the CLI (JSON only at
    the edges: report_schema.report_json). ``thresholds`` judge the notes on evidence
    (observer effect). Every field the report always holds is given, defaults too:
    report_json leaves out only what was never set."""
    samples = collect(job)
    wall = samples.wall_summaries()
    configs = []
    for config in job.configs:
        configs.append(
            ReportConfig(
                label=config.label,
                cpus=config.cpus,
                cpuset=config.cpuset,
                runs=_runs([run for run in config.runs if run.kind in COMMAND_KINDS and not run.traced]),
                traced_runs=_runs([run for run in config.runs if run.kind in COMMAND_KINDS and run.traced]),
                # Stored for the record, never in a statistic (cold caches, .pyc writes).
                warmup_runs=_runs([run for run in config.runs if run.kind == RunKind.warmup]),
                focus_runs=_runs([run for run in config.runs if run.kind == RunKind.focus]),
                disturbed_runs=_runs([run for run in config.runs if run.kind == RunKind.disturbed]),
                # Median of the successful runs only (failed and timed-out runs are in runs[]).
                wall_s=_interval(wall.get(config.label)),
            )
        )
    # Where each test is defined (JUnit's line attribute): check-run annotations point there.
    lines = {r.test_id: r.line for c in job.configs for run in c.runs for r in run.test_results if r.line}
    tests = []
    for test_id, per_config in samples.tests.items():
        summaries = samples.test_summaries(test_id)
        tests.append(
            ReportTest(
                id=test_id,
                line=lines.get(test_id),
                cleared=False,
                configs=[_test_config(label, summaries.get(label), values) for label, values in per_config.items()],
            )
        )
    surveyed = survey_view(job)
    if surveyed is not None:
        tests += _cleared_tests(job, set(samples.tests), lines)
    failed = [
        FailedRun(
            config=config.label,
            repetition=run.repetition,
            exit_code=run.exit_code,
            timed_out=run.timed_out,
            output_tail=run.output_tail,
        )
        for config in job.configs
        for run in config.runs
        if run.kind in (*COMMAND_KINDS, RunKind.focus) and not run.traced and (run.exit_code != 0 or run.timed_out)
    ]
    notes = list(job.notes)
    limits = thresholds or Thresholds()
    if surveyed is not None:
        notes.append(
            f"a suite of {surveyed.tests} tests: the survey ran it whole once per configuration and cleared "
            f"{surveyed.cleared} of them there; "
            + (
                f"{len(surveyed.focused)} were rerun together for their verdicts"
                if surveyed.focused
                else "none was rerun"
            )
            + (
                f"; the budget left {len(surveyed.left_out)} more out (no verdict: rerun them by name, "
                "or give a larger --budget)"
                if surveyed.left_out
                else ""
            )
            + " (the command's own figures rest on the survey's one run per configuration)"
        )
    short = {
        label: len(values)
        for label, values in samples.wall.items()
        if 0 < len(values) < limits.min_repetitions and surveyed is None
    }
    if short:
        notes.append(
            "no cpu_sensitivity or latency_flaky verdict rests on fewer than "
            f"{limits.min_repetitions} successful runs per configuration; "
            + ", ".join(f"{label} had {n}" for label, n in short.items())
            + " (raise --repeat)"
        )
    foreign = [run.foreign_cpus for config in job.configs for run in config.runs]
    if foreign and statistics.median(foreign) > hostload.BUSY_MACHINE_CPUS:
        notes.append(
            f"other processes kept {statistics.median(foreign):.1f} CPUs busy during the median run: "
            "load on neighbouring cores changes the latency under study; rerun on a quiet machine"
        )
    # Evidence runs beside the timing median of their configuration (and test): the
    # observer effect of each probe.
    evidence_runs = []
    for config in job.configs:
        medians: dict[str | None, float | None] = {None: wall[config.label].median if config.label in wall else None}
        for run in config.runs:
            if run.kind != RunKind.evidence:
                continue
            if run.test_id is not None and run.test_id not in medians:
                summary = (
                    samples.test_summaries(run.test_id).get(config.label) if run.test_id in samples.tests else None
                )
                medians[run.test_id] = summary.median if summary else None
            # A test's evidence run is a whole pytest process (start-up included): compare
            # the test's own duration in it, not the process's wall time, with its median.
            observed: float | None = run.wall_s
            if run.test_id is not None:
                durations = [r.duration_s for r in run.test_results if r.test_id == run.test_id]
                observed = durations[0] if durations else None
            evidence_runs.append(
                EvidenceRun(
                    id=run.id,
                    config=config.label,
                    test=run.test_id,
                    probe=run.probe,
                    wall_s=run.wall_s,
                    observed_s=observed,
                    timing_median_s=medians.get(run.test_id),
                    exit_code=run.exit_code,
                    timed_out=run.timed_out,
                )
            )
    findings = sorted(job.findings, key=lambda f: (SEVERITY_ORDER.get(f.severity, 9), f.id))
    for candidate in cpu_sensitivity.undecided(samples, limits, seed=job.screen_seed or 0):
        comparison = compare(candidate.summaries)
        if comparison is None:
            continue
        have = min(summary.n for summary in candidate.summaries.values())
        notes.append(
            f"{candidate.test_id or 'the command'} looks {comparison.ratio:.1f}x slower with {comparison.slow} "
            f"than with {comparison.fast} (rank test p={candidate.p_value:.2g}), but {have} runs cannot tell it "
            f"from chance among all the tests judged: rerun with --repeat {have + 2} or more to decide"
        )
    evidence_notes = observer_effect.notes(RuleContext(job, limits))
    evidence = [
        ReportEvidence(
            id=e.id,
            config=e.config.label if e.config else None,
            test=e.test_id,
            kind=e.kind,
            run=e.run_id,
            content=e.content,
            text=e.text,
            artifacts=e.artifacts,
            # How to read it: e.g. the tracer slowed the run 8x (observer_effect).
            notes=[EvidenceNote.model_validate(evidence_notes[e.id])] if e.id in evidence_notes else [],
        )
        for e in job.evidence
    ]
    report_findings = [report_finding(f) for f in findings]
    base = pull_requests.comparison_view(job)
    return Report(
        schema=SCHEMA,
        job=ReportJob(
            id=job.id,
            project=job.project.name,
            status=job.status.value,
            created_at=job.created_at.isoformat(),
            finished_at=job.finished_at.isoformat() if job.finished_at else None,
            error=job.error,
            # Seed of the screen's run order: the same seed replays the same order.
            screen_seed=job.screen_seed,
            kind=job.kind.value,
            node_class=(
                ReportNodeClass(cpu_model=job.cpu_model, engine_cpus=job.engine_cpus, runner_image=job.runner_image)
                if job.cpu_model or job.engine_cpus
                else None
            ),
        ),
        command=job.command,
        executor=job.executor,
        workdir=job.workdir,
        repeat=job.repeat,
        notes=notes,
        configs=configs,
        tests=tests,
        failed_runs=failed,
        evidence_runs=evidence_runs,
        evidence=evidence,
        findings=report_findings,
        # One story per test: symptom, cause, evidence, what to do (services/diagnose/diagnoses.py).
        diagnoses=stories.build_diagnoses(report_findings, {e.id: e.kind for e in job.evidence}, confirmations(job)),
        # A pull request's job: each test head against base (services/jobs/pull_requests.py),
        # validated here as it leaves the stored comparison rows' JSON.
        base_comparison=BaseComparison.model_validate(base) if base is not None else None,
        survey=surveyed,
        budget=budget_view(job, limits),
        # The node and its measurement lock (services/measure/nodelock.py), per phase; the
        # job's measured_on is stored JSON, validated here.
        measured_on=[
            MeasuredOn.model_validate(
                {**place, "locks": [nodelock.lock_label(lock) for lock in place.get("locks", [])]}
            )
            for place in job.measured_on or []
        ],
        thresholds=job.thresholds,
        # A gate job: each test against its stored history (services/jobs/gate.py), read from
        # the job's stored JSON by stored_gate.
        gate=stored_gate(job),
    )


def budget_view(job: Job, thresholds: Thresholds) -> ReportBudget:
    """The budget's limit, what the runs took, and what it left out."""
    state = job.budget or {}
    limit = job_budget.limit_s(job, thresholds)
    left = state.get("left_out") or {}
    spent = job_budget.spent_s(job)
    reference = job_budget.untraced_suite_s(job)
    suite = reference[0] if reference is not None else None
    whole = job_budget.job_wall_s(job)
    split = job_budget.split_s(job)
    return ReportBudget(
        limit_s=round(limit, 3) if limit is not None else None,
        given=job.budget_s is not None,
        spent_s=round(spent, 3),
        left_out=BudgetLeftOut(
            tests=list(left.get("tests", [])),
            rounds=list(left.get("rounds", [])),
            census=list(left.get("census", [])),
            drill=list(left.get("drill", [])),
        ),
        suite_s=round(suite, 3) if suite is not None else None,
        suite_config=reference[1] if reference is not None else None,
        suite_traced=reference[2] if reference is not None else False,
        cost_ratio=round(spent / suite, 2) if suite else None,
        job_wall_s=round(whole, 3) if whole is not None else None,
        job_cost_ratio=round(whole / suite, 2) if whole is not None and suite else None,
        command_s=round(split["command"], 3),
        evidence_s=round(split["evidence"], 3),
        calibration_s=round(split["calibration"], 3),
        # The runs overlap nothing of lagtrace's own (one run at a time): what is left is its own.
        own_s=round(max(0.0, whole - spent), 3) if whole is not None else None,
    )


def survey_view(job: Job) -> ReportSurvey | None:
    """What the survey of a suite of real size cleared and kept (None: screened whole)."""
    surveyed = [run for config in job.configs for run in config.runs if run.kind == RunKind.survey]
    if not surveyed:
        return None
    tests = {result.test_id for run in surveyed for result in run.test_results}
    focused = [
        result.test_id
        for config in job.configs
        for run in config.runs
        if run.kind == RunKind.focus
        for result in run.test_results
    ]
    kept = list(dict.fromkeys(focused))
    left_out = [test for test in job_budget.left_out_tests(job) if test not in kept]
    return ReportSurvey(
        tests=len(tests),
        cleared=len(tests - set(kept) - set(left_out)),
        focused=kept,
        left_out=left_out,
    )


def _cleared_tests(job: Job, judged: set[str], lines: dict[str, int]) -> list[ReportTest]:
    """The tests a survey cleared, with their one duration per configuration."""
    cleared = {test_id: per_config for test_id, per_config in surveyed(job).items() if test_id not in judged}
    left_out = set(job_budget.left_out_tests(job))
    return [
        ReportTest(
            id=test_id,
            line=lines.get(test_id),
            cleared=test_id not in left_out,
            left_out=test_id in left_out,
            configs=[TestConfig(label=label, median=values[0], runs=values) for label, values in per_config.items()],
        )
        for test_id, per_config in cleared.items()
    ]


def report_finding(f: Finding) -> ReportFinding:
    """A stored finding as the report (and the diagnoses built from it) reads it."""
    return ReportFinding(
        id=f.id,
        kind=f.kind,
        severity=f.severity,
        title=f.title,
        detail=f.detail,
        config=f.config_label,
        test=f.test_id,
        metrics=f.metrics,
        evidence=f.evidence_ids,
        fingerprint=f.fingerprint,
        status=f.status.value,
        regression=f.regression,
    )


def confirmations(job: Job) -> list[tuple[int, ConfirmContent]]:
    """The confirm step's experiments (services/measure/confirm.py), with their evidence ids."""
    return [
        (e.id, e.parsed)
        for e in job.evidence
        if e.kind == EvidenceKind.confirm and isinstance(e.parsed, ConfirmContent) and e.id is not None
    ]
