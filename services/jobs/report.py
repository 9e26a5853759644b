"""The report ``lagtrace.report/v1``, built from the database (its text rendering:
services/jobs/report_text.py)."""

from __future__ import annotations

import statistics
from typing import Any

from services.diagnose import cpu_sensitivity, observer_effect
from services.diagnose import diagnoses as stories
from services.diagnose.context import RuleContext
from services.diagnose.findings import SEVERITY_ORDER
from services.diagnose.report_parts import ReportFinding
from services.jobs import pull_requests
from services.jobs.report_schema import SCHEMA_ID, validated
from services.measure import budget as job_budget
from services.measure import hostload, nodelock
from services.measure.samples import collect, surveyed
from services.measure.stats import Summary, compare
from services.models import COMMAND_KINDS, Job, RunKind
from services.thresholds import Thresholds

SCHEMA = SCHEMA_ID

RUN_FIELDS = (
    "wall_s",
    "user_s",
    "sys_s",
    "max_rss_kb",
    "voluntary_ctx_switches",
    "involuntary_ctx_switches",
    "exit_code",
    "timed_out",
    "nr_periods",
    "nr_throttled",
    "throttled_s",
    "foreign_cpus",
    "read_syscalls",
    "read_bytes",
)


def _summary(summary: Summary | None) -> dict[str, Any] | None:
    return summary.as_dict() if summary else None


def build_report(job: Job, thresholds: Thresholds | None = None) -> dict[str, Any]:
    """The v1 report. ``thresholds`` judge the notes on evidence (observer effect)."""
    samples = collect(job)
    wall = samples.wall_summaries()
    configs = []
    for config in job.configs:
        runs = [run for run in config.runs if run.kind in COMMAND_KINDS]
        configs.append(
            {
                "label": config.label,
                "cpus": config.cpus,
                "cpuset": config.cpuset,
                "runs": [{field: getattr(run, field) for field in RUN_FIELDS} for run in runs],
                # Stored for the record, never in a statistic (cold caches, .pyc writes).
                "warmup_runs": [
                    {field: getattr(run, field) for field in RUN_FIELDS}
                    for run in config.runs
                    if run.kind == RunKind.warmup
                ],
                "focus_runs": [
                    {field: getattr(run, field) for field in RUN_FIELDS}
                    for run in config.runs
                    if run.kind == RunKind.focus
                ],
                "disturbed_runs": [
                    {field: getattr(run, field) for field in RUN_FIELDS}
                    for run in config.runs
                    if run.kind == RunKind.disturbed
                ],
                # Median of the successful runs only (failed and timed-out runs are in runs[]).
                "wall_s": _summary(wall.get(config.label)),
            }
        )
    # Where each test is defined (JUnit's line attribute): check-run annotations point there.
    lines = {r.test_id: r.line for c in job.configs for run in c.runs for r in run.test_results if r.line}
    tests = []
    for test_id, per_config in samples.tests.items():
        summaries = samples.test_summaries(test_id)
        tests.append(
            {
                "id": test_id,
                "line": lines.get(test_id),
                "cleared": False,
                "configs": [
                    {"label": label, **(_summary(summaries.get(label)) or {}), "runs": values}
                    for label, values in per_config.items()
                ],
            }
        )
    surveyed = survey_view(job)
    if surveyed is not None:
        tests += _cleared_tests(job, set(samples.tests), lines)
    failed = [
        {
            "config": config.label,
            "repetition": run.repetition,
            "exit_code": run.exit_code,
            "timed_out": run.timed_out,
            "output_tail": run.output_tail,
        }
        for config in job.configs
        for run in config.runs
        if run.kind in (*COMMAND_KINDS, RunKind.focus) and (run.exit_code != 0 or run.timed_out)
    ]
    notes = list(job.notes)
    limits = thresholds or Thresholds()
    if surveyed is not None:
        notes.append(
            f"a suite of {surveyed['tests']} tests: the survey ran it whole once per configuration and cleared "
            f"{surveyed['cleared']} of them there; "
            + (
                f"{len(surveyed['focused'])} were rerun together for their verdicts"
                if surveyed["focused"]
                else "none was rerun"
            )
            + (
                f"; the budget left {len(surveyed['left_out'])} more out (no verdict: rerun them by name, "
                "or give a larger --budget)"
                if surveyed["left_out"]
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
                {
                    "id": run.id,
                    "config": config.label,
                    "test": run.test_id,
                    "probe": run.probe,
                    "wall_s": run.wall_s,
                    "observed_s": observed,
                    "timing_median_s": medians.get(run.test_id),
                    "exit_code": run.exit_code,
                    "timed_out": run.timed_out,
                }
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
        {
            "id": e.id,
            "config": e.config.label if e.config else None,
            "test": e.test_id,
            "kind": e.kind,
            "run": e.run_id,
            "content": e.content,
            "text": e.text,
            "artifacts": e.artifacts,
            # How to read it: e.g. the tracer slowed the run 8x (observer_effect).
            "notes": [evidence_notes[e.id]] if e.id in evidence_notes else [],
        }
        for e in job.evidence
    ]
    finding_dicts = [
        {
            "id": f.id,
            "kind": f.kind,
            "severity": f.severity,
            "title": f.title,
            "detail": f.detail,
            "config": f.config_label,
            "test": f.test_id,
            "metrics": f.metrics,
            "evidence": f.evidence_ids,
            "fingerprint": f.fingerprint,
            "status": f.status.value,
            "regression": f.regression,
        }
        for f in findings
    ]
    report = {
        "schema": SCHEMA,
        "job": {
            "id": job.id,
            "project": job.project.name,
            "status": job.status.value,
            "created_at": job.created_at.isoformat(),
            "finished_at": job.finished_at.isoformat() if job.finished_at else None,
            "error": job.error,
            # Seed of the screen's run order: the same seed replays the same order.
            "screen_seed": job.screen_seed,
            "kind": job.kind.value,
            "node_class": (
                {"cpu_model": job.cpu_model, "engine_cpus": job.engine_cpus, "runner_image": job.runner_image}
                if job.cpu_model or job.engine_cpus
                else None
            ),
        },
        "command": job.command,
        "executor": job.executor,
        "workdir": job.workdir,
        "repeat": job.repeat,
        "notes": notes,
        "configs": configs,
        "tests": tests,
        "failed_runs": failed,
        "evidence_runs": evidence_runs,
        "evidence": evidence,
        "findings": finding_dicts,
        # One story per test: symptom, cause, evidence, what to do (services/diagnose/diagnoses.py).
        "diagnoses": [
            story.model_dump(mode="json", exclude_unset=True)
            for story in stories.build_diagnoses(
                [ReportFinding.model_validate(f) for f in finding_dicts], {e.id: e.kind for e in job.evidence}
            )
        ],
        # A pull request's job: each test head against base (services/jobs/pull_requests.py).
        "base_comparison": pull_requests.comparison_view(job),
        "survey": surveyed,
        "budget": budget_view(job, limits),
        # The node and its measurement lock (services/measure/nodelock.py), per phase.
        "measured_on": [
            {**place, "locks": [nodelock.lock_label(lock) for lock in place.get("locks", [])]}
            for place in job.measured_on or []
        ],
        "thresholds": job.thresholds,
        # A gate job: each test against its stored history (services/jobs/gate.py).
        "gate": gate_view(job),
    }
    return validated(report)


def gate_view(job: Job) -> dict[str, Any] | None:
    """A gate's verdicts with their counts (None: not a gate, or it could not judge)."""
    if not job.gate:
        return None
    counts: dict[str, int] = {}
    for test in job.gate["tests"]:
        counts[test["verdict"]] = counts.get(test["verdict"], 0) + 1
    return {**job.gate, "counts": counts}


def budget_view(job: Job, thresholds: Thresholds) -> dict[str, Any]:
    """The budget's limit, what the runs took, and what it left out."""
    state = job.budget or {}
    limit = job_budget.limit_s(job, thresholds)
    left = state.get("left_out") or {}
    spent = job_budget.spent_s(job)
    suite = job_budget.reference_s(job)
    return {
        "limit_s": round(limit, 3) if limit is not None else None,
        "given": job.budget_s is not None,
        "spent_s": round(spent, 3),
        "left_out": {key: list(left.get(key, [])) for key in ("tests", "rounds", "census", "drill")},
        "suite_s": round(suite, 3) if suite is not None else None,
        "cost_ratio": round(spent / suite, 2) if suite else None,
    }


def survey_view(job: Job) -> dict[str, Any] | None:
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
    left_out = [test for test in ((job.budget or {}).get("left_out") or {}).get("tests", []) if test not in kept]
    return {
        "tests": len(tests),
        "cleared": len(tests - set(kept) - set(left_out)),
        "focused": kept,
        "left_out": left_out,
    }


def _cleared_tests(job: Job, judged: set[str], lines: dict[str, int]) -> list[dict[str, Any]]:
    """The tests a survey cleared, with their one duration per configuration."""
    cleared = {test_id: per_config for test_id, per_config in surveyed(job).items() if test_id not in judged}
    left_out = set(((job.budget or {}).get("left_out") or {}).get("tests", []))
    return [
        {
            "id": test_id,
            "line": lines.get(test_id),
            "cleared": test_id not in left_out,
            "left_out": test_id in left_out,
            "configs": [{"label": label, "median": values[0], "runs": values} for label, values in per_config.items()],
        }
        for test_id, per_config in cleared.items()
    ]
