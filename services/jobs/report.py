"""The report ``lagtrace.report/v1``, built from the database, and its text rendering."""

from __future__ import annotations

import shlex
import statistics
from typing import Any

from services import evidence as evidence_models
from services.diagnose import cpu_sensitivity, observer_effect
from services.diagnose import diagnoses as stories
from services.diagnose.context import RuleContext
from services.diagnose.findings import SEVERITY_ORDER, format_seconds
from services.evidence import (
    AsyncioLoopContent,
    CensusContent,
    FaulthandlerContent,
    GdbContent,
    ProcIoContent,
    PySpyDumpContent,
    PySpyRecordContent,
    PythonFrame,
    ReadsContent,
    StallContent,
    StraceContent,
)
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
        "diagnoses": stories.build_diagnoses(finding_dicts, evidence),
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


# The text report lists the tests with findings and this many of the slowest others
# (`--all`: every test; the JSON always holds them all).
SLOWEST_SHOWN = 5


def _slowest(test: dict[str, Any]) -> float:
    return max((c.get("median") or 0.0 for c in test["configs"]), default=0.0)


def _tests_section(report: dict[str, Any], all_tests: bool) -> list[str]:
    """Tests (median duration per configuration): the flagged, then the slowest few, and
    how many more there are."""
    labels = [c["label"] for c in report["configs"]]
    flagged_ids = {f["test"] for f in report["findings"] if f["test"]}
    tests = report["tests"]
    flagged = [test for test in tests if test["id"] in flagged_ids]
    others = sorted((test for test in tests if test["id"] not in flagged_ids), key=lambda test: -_slowest(test))
    shown = others if all_tests else others[:SLOWEST_SHOWN]
    rows = []
    for test in [*flagged, *shown]:
        by_label = {c["label"]: c for c in test["configs"]}
        medians = [by_label[label].get("median") if label in by_label else None for label in labels]
        known = [m for m in medians if m]
        ratio = f"{max(known) / min(known):.1f}x" if len(known) > 1 and min(known) > 0 else "-"
        mark = " (survey only)" if test.get("cleared") else " (left out by the budget)" if test.get("left_out") else ""
        rows.append([test["id"] + (mark if all_tests else ""), *(_seconds(m) for m in medians), ratio])
    out = [
        f"Tests (median duration per configuration): {len(flagged)} with findings"
        + ("" if all_tests else f", then the {len(shown)} slowest others"),
        *("  " + line for line in _table(["test", *labels, "max/min"], rows)),
    ]
    cleared = [test for test in others if not test.get("left_out")]
    left_out = [test for test in others if test.get("left_out")]
    survey_only = sum(1 for test in cleared if test.get("cleared"))
    if all_tests:
        return out
    hidden = len(others) - len(shown)
    summary = f"  {len(cleared)} tests cleared"
    parts = []
    if survey_only:
        parts.append(f"{survey_only} by the survey alone (one run per configuration)")
    if len(cleared) - survey_only:
        parts.append(f"{len(cleared) - survey_only} screened without a finding")
    if parts:
        summary += f" ({', '.join(parts)})"
    if left_out:
        summary += f"; {len(left_out)} left out by the budget, unjudged"
    if hidden:
        summary += f"; {hidden} not listed here: `--all` lists every test, the JSON report holds them all"
    return [*out, summary]


def _budget_section(budget: dict[str, Any]) -> list[str]:
    limit = budget["limit_s"]
    out = [
        f"Budget: the runs took {budget['spent_s']:.1f} s"
        + (f" of {limit:.1f} s" if limit is not None else "")
        + (" (asked for)" if budget["given"] else " (the default: a multiple of the suite's own time)")
        + (
            f": {budget['cost_ratio']:.1f}x the suite's own time ({budget['suite_s']:.1f} s)"
            if budget.get("cost_ratio") is not None
            else ""
        )
    ]
    left = budget["left_out"]
    if left["tests"]:
        shown = ", ".join(left["tests"][:5]) + (" ..." if len(left["tests"]) > 5 else "")
        out.append(f"  left out of the focused screen (least suspicious first): {len(left['tests'])} tests: {shown}")
    for rounds in left["rounds"]:
        out.append(f"  left out of the screen: {rounds}")
    if left["census"]:
        out.append(f"  left out: the census (in {', '.join(left['census'])})")
    for drilled in left["drill"]:
        out.append(f"  left out of the drill: {drilled}")
    return out


def _seconds(value: float | None) -> str:
    return "-" if value is None else format_seconds(value)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=False)]

    def line(cells: list[str]) -> str:
        return "  ".join(
            str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=False))
        )

    return [line(header), line(["-" * w for w in widths]), *(line(row) for row in rows)]


def _gate_section(gate: dict[str, Any]) -> list[str]:
    """The gate's counts, then every test that did not stop at its one run inside its history."""
    counts = ", ".join(f"{n} {verdict.replace('_', ' ')}" for verdict, n in sorted(gate["counts"].items()))
    where = f"the {gate['branch']} branch's" if gate["branch"] else "earlier `lagtrace run` jobs'"
    lines = [f"Gate: each test run once with {gate['config']}, against {where} stored runs there: {counts}"]
    rows = [
        [
            test["test"],
            test["verdict"].replace("_", " "),
            f"{test['stored']} from {len(test['jobs'])} jobs" if test["stored"] else "none",
            ", ".join(_seconds(s) for s in test["fresh_s"]),
            f"{test['ratio']:.2f}x" if test["ratio"] is not None else "-",
            "yes" if test["went_on"] else "no",
        ]
        for test in gate["tests"]
        if test["verdict"] != "unchanged" or len(test["fresh_s"]) > 1
    ]
    if rows:
        lines += [
            "  " + line
            for line in _table(["test", "verdict", "stored runs", "fresh runs", "change", "every config"], rows)
        ]
    if gate["counts"].get("new"):
        lines.append(
            f"  new: no history, or fewer than {gate['min_stored']} stored runs (one run cannot stand out of fewer)"
        )
    return lines


def render_text(report: dict[str, Any], all_tests: bool = False) -> str:
    """The human report: findings first, then configurations, then tests (the flagged
    ones and the slowest few; ``all_tests``: every one)."""
    out = [f"lagtrace job {report['job']['id']}: {shlex.join(report['command'])}  [{report['executor']} executor]", ""]
    status = report["job"].get("status", "done")
    if status != "done":
        # A job that did not finish concluded nothing: that comes first, not a clean-looking
        # "Findings: none" with the reason only on stderr.
        out += [*_unfinished(report["job"]), ""]
    out += stories.render(report.get("diagnoses", []))
    findings = report["findings"]
    if findings:
        out.append(f"Findings ({len(findings)})")
    else:
        out.append("Findings: none" if status == "done" else f"Findings: none (the job {status} before any were made)")
    for finding in findings:
        where = f" [{finding['test']}]" if finding["test"] else ""
        if finding["regression"]:
            where += " REGRESSION (was marked fixed)"
        elif finding["status"] != "new":
            where += f" ({finding['status']})"
        out.append(f"  {finding['severity'].upper():6} {finding['kind']}{where}: {finding['title']}")
        # A detail's later lines are output the command printed (an output tail): one per line.
        prose, *output = finding["detail"].split("\n")
        out.append(f"         {prose}")
        out += [f"           {line}" for line in output]
        if finding["evidence"]:
            kinds = {e["id"]: e["kind"] for e in report["evidence"]}
            refs = ", ".join(f"{kinds.get(i, 'evidence')} #{i}" for i in finding["evidence"])
            out.append(f"         evidence: {refs} (below, and in the JSON's evidence[])")
    out.append("")

    fastest = min((c["wall_s"]["median"] for c in report["configs"] if c["wall_s"]), default=None)
    rows = []
    for config in report["configs"]:
        summary = config["wall_s"]
        runs = config["runs"]
        throttled = [r for r in runs if r["nr_periods"]]
        rows.append(
            [
                config["label"],
                str(len(runs)),
                _seconds(summary["median"]) if summary else "-",
                f"{_seconds(summary['ci_low'])} .. {_seconds(summary['ci_high'])}" if summary else "-",
                f"{summary['median'] / fastest:.1f}x" if summary and fastest else "-",
                f"{sum(r['user_s'] + r['sys_s'] for r in runs) / len(runs):.3f} s" if runs else "-",
                f"{sum(r['voluntary_ctx_switches'] for r in runs) // max(1, len(runs))}",
                (
                    f"{sum(r['nr_throttled'] for r in throttled)}/{sum(r['nr_periods'] for r in throttled)}"
                    if throttled
                    else "-"
                ),
            ]
        )
    out.append("Configurations (wall time of the whole command)")
    out += [
        "  " + line
        for line in _table(
            ["config", "runs", "median", "interval", "vs fastest", "cpu/run", "vol.cs/run", "throttled"], rows
        )
    ]

    if report["tests"]:
        out += ["", *_tests_section(report, all_tests)]
    budget = report.get("budget")
    if budget and (budget["given"] or any(budget["left_out"].values()) or budget.get("cost_ratio") is not None):
        out += ["", *_budget_section(budget)]

    if report.get("gate"):
        out += ["", *_gate_section(report["gate"])]
    comparison = report.get("base_comparison")
    if comparison:
        out += ["", f"Compared with base {comparison['base_commit'][:12]} (head median / base median, 95 % interval)"]
        rows = [
            [
                row["test"] or "(whole command)",
                row["config"],
                _seconds(row["base_median_s"]),
                _seconds(row["head_median_s"]),
                f"{row['ratio']:.2f}x" if row["ratio"] is not None else "-",
                f"{row['ratio_low']:.2f} .. {row['ratio_high']:.2f}" if row["ratio_low"] is not None else "-",
                row["verdict"].replace("_", " "),
            ]
            for row in comparison["tests"]
        ]
        out += [
            "  " + line for line in _table(["test", "config", "base", "head", "change", "interval", "verdict"], rows)
        ]

    if report["failed_runs"]:
        out += [
            "",
            f"Runs that did not exit 0 ({len(report['failed_runs'])}): the command failed, not lagtrace; "
            "they are left out of every median",
        ]
        for failed in report["failed_runs"][:5]:
            state = "timed out" if failed["timed_out"] else f"exit {failed['exit_code']}"
            out.append(f"  {failed['config']} run {failed['repetition']}: {state}")
        tail = next((f["output_tail"] for f in report["failed_runs"] if f["output_tail"]), None)
        if tail:
            out += ["  last output:", *("    " + line for line in tail.rstrip().splitlines())]
    if report["evidence"]:
        out += ["", f"Evidence ({len(report['evidence'])} entries from {len(report['evidence_runs'])} evidence runs)"]
        for entry in report["evidence"]:
            out += render_evidence(entry)
    if report["evidence_runs"]:
        out += ["", "Evidence runs (the command's, or the test's, time under the probe vs its timing median)"]
        rows = []
        for run in report["evidence_runs"]:
            observed, median = run.get("observed_s", run["wall_s"]), run["timing_median_s"]
            rows.append(
                [
                    run["probe"],
                    run["config"] + (f" [{run['test']}]" if run["test"] else ""),
                    _seconds(run["wall_s"]),
                    _seconds(observed),
                    _seconds(median),
                    f"{observed / median:.1f}x" if observed is not None and median else "-",
                    "timed out" if run["timed_out"] else f"exit {run['exit_code']}",
                ]
            )
        out += [
            "  " + line
            for line in _table(["probe", "config", "process wall", "observed", "timing median", "ratio", "end"], rows)
        ]
    for note in report["notes"]:
        out += ["", f"Note: {note}"]
    for place in report.get("measured_on", []):
        what = f"{place['phase']} of shard {place['shard']}" if place.get("shard") else place["phase"]
        locks = [lock for lock in place["locks"] if lock != "node"]
        held = f"the locks of {', '.join(locks)}" if locks else "the node's measurement lock"
        out += ["", f"The {what} ran on node {place['node']}, holding {held}"]
    return "\n".join(out) + "\n"


def _unfinished(job: dict[str, Any]) -> list[str]:
    """What a job that did not finish says first: that it did not, and why (its error keeps
    its lines: an installer's or the command's output)."""
    status = job["status"]
    if status in ("queued", "running"):
        return [f"JOB {status.upper()}: not finished yet; what follows is what it measured so far"]
    prose, *output = (job.get("error") or "no reason was recorded").split("\n")
    return [
        f"JOB {status.upper()}: {prose}",
        *(f"  {line}" for line in output),
        "Nothing below is a verdict: the job stopped before its findings were made.",
    ]


FRAMES_SHOWN = 4
SYSCALLS_SHOWN = 5


def _frames(frames: list[PythonFrame]) -> str:
    shown = [f"{f.function} ({f.file.rsplit('/', 1)[-1] or '?'}:{f.line})" for f in frames[:FRAMES_SHOWN]]
    more = f" < ... {len(frames) - FRAMES_SHOWN} more" if len(frames) > FRAMES_SHOWN else ""
    return " < ".join(shown) + more if shown else "(no Python frames)"


def render_evidence(entry: dict[str, Any]) -> list[str]:
    """The key lines of one evidence entry: top syscalls, threads and frames at the stall."""
    content = evidence_models.parse(entry["kind"], entry["content"])
    where = entry["config"] or "-"
    if entry["test"]:
        where += f" [{entry['test']}]"
    head = f"  {entry['kind']} ({where})"
    if not content.ok:
        return [f"{head}: {content.status}: {content.reason or ''}"]
    lines: list[str] = []
    match content:
        case StraceContent(syscalls=[*rows]) if rows:
            lines.append(f"{head}: {content.top} holds {content.top_pct_time or 0:.1f} % of syscall time")
            lines += [
                f"      {row.pct_time:6.2f} %  {row.seconds:10.6f} s  {row.calls:9d} calls  "
                f"{row.errors:7d} errors  {row.name}"
                for row in rows[:SYSCALLS_SHOWN]
            ]
        case StallContent():
            at = f"snapshot at {content.elapsed_s or 0:.2f} s"
            if content.test_elapsed_s is not None:
                at += f" ({content.test_elapsed_s:.2f} s into {content.test})"
            lines.append(
                f"{head}: {at} (threshold {content.stall_after_s or 0:.2f} s), "
                f"run ended after {content.wall_s or 0:.2f} s{' (timed out)' if content.timed_out else ''}"
                + (f", attempt {content.attempts}" if (content.attempts or 1) > 1 else "")
            )
            if content.frozen_s is not None:
                processes = ", ".join(
                    f"{p.program} ({p.pid}{', snapshotted' if p.snapshotted else ''})" for p in content.processes or []
                )
                lines.append(
                    f"      frozen {(content.freeze_delay_s or 0) * 1000:.1f} ms after the deadline, "
                    f"for {content.frozen_s:.2f} s; processes: {processes}"
                )
            lines += [f"      taken: {item}" for item in content.captured or []]
            lines += [f"      not taken: {item}" for item in content.not_captured or []]
        case PySpyDumpContent(threads=[*threads]):
            process = f" of {content.program} ({content.pid})" if content.program else ""
            holder = f", GIL held by {content.gil_holder}" if content.gil_holder is not None else ""
            lines.append(
                f"{head}: {len(threads)} threads{process} at {content.elapsed_s or 0:.2f} s "
                f"({content.phase or 'stall'}){holder}"
            )
            lines += [f'      {t.id} "{t.name or ""}" {t.state}: {_frames(t.frames)}' for t in threads]
        case GdbContent(threads=[*threads]):
            lines.append(
                f"{head}: {len(threads)} threads, {content.waiting_for_gil} waiting for the GIL "
                f"(read by {content.reader})"
            )
            if content.py_bt:
                lines.append(f"      note: {content.py_bt}")
            for thread in threads:
                flag = " [Waiting for the GIL]" if thread.waiting_for_gil else ""
                lines.append(f"      thread {thread.id} (LWP {thread.lwp}){flag}: {_frames(thread.frames)}")
        case FaulthandlerContent(threads=[*threads]):
            lines.append(f"{head}: {len(threads)} threads at the {content.trigger}")
            lines += [f"      {'current ' if t.current else ''}thread {t.id}: {_frames(t.frames)}" for t in threads]
        case ProcIoContent(counters=dict() as counters):
            per_read = content.bytes_per_read_syscall
            lines.append(
                f"{head}: {counters.get('syscr', 0)} read syscalls, {counters.get('rchar', 0)} bytes"
                + (f" = {per_read:.1f} bytes per read" if per_read is not None else "")
                + f" (at {content.elapsed_s or 0:.2f} s, {content.phase}"
                + (f", {content.program} {content.pid})" if content.program else ")")
            )
        case PySpyRecordContent(threads=[*threads]):
            lines.append(f"{head}: {content.samples} samples at {content.rate_hz} Hz, idle threads included")
            lines += [
                f"      {t.name}: {t.top_frames[0].pct:.0f} % in {t.top_frames[0].frame}"
                for t in threads[:4]
                if t.top_frames
            ]
        case ReadsContent(by_fd_type=dict() as by_type):
            lines.append(f"{head}: every read syscall, by descriptor type")
            for fd_type, row in sorted(by_type.items(), key=lambda item: -item[1].calls):
                median = row.median_bytes
                lines.append(
                    f"      {fd_type:<7} {row.calls:9d} calls  {row.bytes:11d} bytes"
                    + (f"  median {median:.0f} B, most often {row.mode_bytes} B" if median is not None else "")
                )
        case AsyncioLoopContent(blocking_calls=[*calls]):
            lines.append(
                f"{head}: {content.slow_callbacks} of {content.callbacks} callbacks ran over "
                f"{(content.threshold_s or 0) * 1000:.0f} ms, blocking the loop {content.blocked_s or 0:.3f} s in all"
            )
            lines += [
                f"      {call.count} x {call.call}: {call.total_s:.3f} s, longest {call.max_s:.3f} s"
                for call in calls[:3]
            ]
        case CensusContent(tests=dict() as tests):
            lines.append(f"{head}: {content.tests_seen or 0} tests, the sleeps and reads of each under strace")
            busiest = sorted(
                tests.items(), key=lambda item: -(item[1].sleeps + sum(r.reads for r in item[1].reads.values()))
            )
            for test_id, row in busiest[:5]:
                reads = ", ".join(f"{fd} {r.reads} of {r.median_bytes:.0f} B" for fd, r in row.reads.items())
                lines.append(f"      {test_id}: {row.sleeps} sleeps" + (f", reads: {reads}" if reads else ""))
        case _:
            lines.append(head)
    for note in entry.get("notes", []):
        lines.append(f"      note: {note['text']}")
    for artifact in entry["artifacts"]:
        if artifact.get("key"):
            lines.append(
                f"      artifact {artifact['key']} ({artifact['size']} bytes, {artifact['stored_size']} stored)"
            )
        else:
            lines.append(f"      artifact {artifact['name']} not stored: {artifact.get('reason')}")
    return lines
