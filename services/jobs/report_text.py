"""The report's text rendering (`lagtrace run`, `lagtrace report`): findings first, then
configurations, tests, the budget, the gate, evidence; read from the ``lagtrace.report/v1``
model (services/jobs/report_schema.py) that services/jobs/report.py builds."""

from __future__ import annotations

import shlex

from services import evidence as evidence_models
from services.diagnose import diagnoses as stories
from services.diagnose.findings import format_seconds
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
from services.jobs.report_schema import Report, ReportBudget, ReportEvidence, ReportGate, ReportJob, ReportTest

# The text report lists the tests with findings and this many of the slowest others
# (`--all`: every test; the JSON always holds them all).
SLOWEST_SHOWN = 5


def _slowest(test: ReportTest) -> float:
    return max((c.median or 0.0 for c in test.configs), default=0.0)


def _tests_section(report: Report, all_tests: bool) -> list[str]:
    """Tests (median duration per configuration): the flagged, then the slowest few, and
    how many more there are."""
    labels = [c.label for c in report.configs]
    flagged_ids = {f.test for f in report.findings if f.test}
    tests = report.tests
    flagged = [test for test in tests if test.id in flagged_ids]
    others = sorted((test for test in tests if test.id not in flagged_ids), key=lambda test: -_slowest(test))
    shown = others if all_tests else others[:SLOWEST_SHOWN]
    rows = []
    for test in [*flagged, *shown]:
        by_label = {c.label: c for c in test.configs}
        medians = [by_label[label].median if label in by_label else None for label in labels]
        known = [m for m in medians if m]
        ratio = f"{max(known) / min(known):.1f}x" if len(known) > 1 and min(known) > 0 else "-"
        mark = " (survey only)" if test.cleared else " (left out by the budget)" if test.left_out else ""
        rows.append([test.id + (mark if all_tests else ""), *(_seconds(m) for m in medians), ratio])
    out = [
        f"Tests (median duration per configuration): {len(flagged)} with findings"
        + ("" if all_tests else f", then the {len(shown)} slowest others"),
        *("  " + line for line in _table(["test", *labels, "max/min"], rows)),
    ]
    cleared = [test for test in others if not test.left_out]
    left_out = [test for test in others if test.left_out]
    survey_only = sum(1 for test in cleared if test.cleared)
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


def _traced_lines(report: Report) -> list[str]:
    """The census's traced survey run, as what it is: evidence whose tracer slowed it, set
    beside the same configuration's (or else the fastest) untraced median."""
    fastest = min((c.wall_s.median for c in report.configs if c.wall_s), default=None)
    out = []
    for config in report.configs:
        for run in config.traced_runs:
            beside = config.wall_s.median if config.wall_s else fastest
            where = "its untraced median" if config.wall_s else "the fastest untraced median"
            slowdown = f", {run.wall_s / beside:.1f}x {where}" if beside else ""
            out.append(
                f"  {config.label}: its survey run ran under the census's strace (sleeps and reads): "
                f"{_seconds(run.wall_s)}{slowdown}, in no figure above"
            )
    return out


def _cost_lines(budget: ReportBudget) -> list[str]:
    """What the job cost: its whole wall time and its runs', each against the suite's own
    untraced time, and where the time went."""
    if budget.job_wall_s is None:
        return []
    unit = ""
    if budget.suite_s:
        taken = "its only run, traced by the census" if budget.suite_traced else "the median of its untraced runs"
        unit = f", {budget.job_wall_s / budget.suite_s:.1f}x the suite's own time ({budget.suite_s:.2f} s: {taken}"
        unit += f" with {budget.suite_config})" if budget.suite_config else ")"
    parts = [f"the command's runs {budget.command_s or 0:.1f} s"]
    if budget.evidence_s:
        parts.append(f"evidence runs {budget.evidence_s:.1f} s")
    if budget.calibration_s:
        parts.append(f"calibration {budget.calibration_s:.1f} s")
    if budget.own_s is not None:
        share = budget.own_s / budget.job_wall_s if budget.job_wall_s else 0.0
        parts.append(f"lagtrace's own time outside any run {budget.own_s:.1f} s ({share:.0%})")
    return [f"Cost: the job took {budget.job_wall_s:.1f} s, created to finished{unit}", f"  {'; '.join(parts)}"]


def _budget_section(budget: ReportBudget) -> list[str]:
    limit = budget.limit_s
    out = [
        *_cost_lines(budget),
        f"Budget: the runs took {budget.spent_s:.1f} s"
        + (f" of {limit:.1f} s" if limit is not None else "")
        + (" (asked for)" if budget.given else " (the default: a multiple of the suite's own time)")
        + (
            f": {budget.cost_ratio:.1f}x the suite's own time ({budget.suite_s or 0:.1f} s)"
            if budget.cost_ratio is not None
            else ""
        ),
    ]
    left = budget.left_out
    if left.tests:
        shown = ", ".join(left.tests[:5]) + (" ..." if len(left.tests) > 5 else "")
        out.append(f"  left out of the focused screen (least suspicious first): {len(left.tests)} tests: {shown}")
    for rounds in left.rounds:
        out.append(f"  left out of the screen: {rounds}")
    if left.census:
        out.append(f"  left out: the census (in {', '.join(left.census)})")
    for drilled in left.drill:
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


def _gate_section(gate: ReportGate) -> list[str]:
    """The gate's counts, then every test that did not stop at its one run inside its history."""
    counts = ", ".join(f"{n} {verdict.replace('_', ' ')}" for verdict, n in sorted(gate.counts.items()))
    where = f"the {gate.branch} branch's" if gate.branch else "earlier `lagtrace run` jobs'"
    lines = [f"Gate: each test run once with {gate.config}, against {where} stored runs there: {counts}"]
    rows = [
        [
            test.test,
            test.verdict.replace("_", " "),
            f"{test.stored} from {len(test.jobs)} jobs" if test.stored else "none",
            ", ".join(_seconds(s) for s in test.fresh_s),
            f"{test.ratio:.2f}x" if test.ratio is not None else "-",
            "yes" if test.went_on else f"no: job {test.carried_from}'s findings carried" if test.carried_from else "no",
        ]
        for test in gate.tests
        if test.verdict != "unchanged" or len(test.fresh_s) > 1 or test.checked_s
    ]
    if rows:
        lines += [
            "  " + line
            for line in _table(["test", "verdict", "stored runs", "fresh runs", "change", "every config"], rows)
        ]
    if gate.counts.get("new"):
        lines.append(
            f"  new: no history, or fewer than {gate.min_stored} stored runs (one run cannot stand out of fewer)"
        )
    return lines


def render_text(report: Report, all_tests: bool = False) -> str:
    """The human report: findings first, then configurations, then tests (the flagged
    ones and the slowest few; ``all_tests``: every one)."""
    out = [f"lagtrace job {report.job.id}: {shlex.join(report.command)}  [{report.executor} executor]", ""]
    status = report.job.status
    if status != "done":
        # A job that did not finish concluded nothing: that comes first, not a clean-looking
        # "Findings: none" with the reason only on stderr.
        out += [*_unfinished(report.job), ""]
    out += stories.render(report.diagnoses)
    findings = report.findings
    if findings:
        out.append(f"Findings ({len(findings)})")
    else:
        out.append("Findings: none" if status == "done" else f"Findings: none (the job {status} before any were made)")
    for finding in findings:
        where = f" [{finding.test}]" if finding.test else ""
        if finding.regression:
            where += " REGRESSION (was marked fixed)"
        elif finding.status != "new":
            where += f" ({finding.status})"
        out.append(f"  {finding.severity.upper():6} {finding.kind}{where}: {finding.title}")
        # A detail's later lines are output the command printed (an output tail): one per line.
        prose, *output = finding.detail.split("\n")
        out.append(f"         {prose}")
        out += [f"           {line}" for line in output]
        if finding.evidence:
            kinds = {e.id: e.kind for e in report.evidence}
            refs = ", ".join(f"{kinds.get(i, 'evidence')} #{i}" for i in finding.evidence)
            out.append(f"         evidence: {refs} (below, and in the JSON's evidence[])")
    out.append("")

    fastest = min((c.wall_s.median for c in report.configs if c.wall_s), default=None)
    rows = []
    for config in report.configs:
        summary = config.wall_s
        runs = config.runs
        throttled = [r for r in runs if r.nr_periods]
        rows.append(
            [
                config.label,
                str(len(runs)),
                _seconds(summary.median) if summary else "-",
                f"{_seconds(summary.ci_low)} .. {_seconds(summary.ci_high)}" if summary else "-",
                f"{summary.median / fastest:.1f}x" if summary and fastest else "-",
                f"{sum(r.user_s + r.sys_s for r in runs) / len(runs):.3f} s" if runs else "-",
                f"{sum(r.voluntary_ctx_switches for r in runs) // len(runs)}" if runs else "-",
                (
                    f"{sum(r.nr_throttled or 0 for r in throttled)}/{sum(r.nr_periods or 0 for r in throttled)}"
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
    out += _traced_lines(report)

    if report.tests:
        out += ["", *_tests_section(report, all_tests)]
    budget = report.budget
    if budget and (
        budget.given
        or any(budget.left_out.model_dump().values())
        or budget.cost_ratio is not None
        or budget.job_wall_s is not None
    ):
        out += ["", *_budget_section(budget)]

    if report.gate:
        out += ["", *_gate_section(report.gate)]
    comparison = report.base_comparison
    if comparison:
        out += ["", f"Compared with base {comparison.base_commit[:12]} (head median / base median, 95 % interval)"]
        rows = [
            [
                row.test or "(whole command)",
                row.config,
                _seconds(row.base_median_s),
                _seconds(row.head_median_s),
                f"{row.ratio:.2f}x" if row.ratio is not None else "-",
                f"{row.ratio_low:.2f} .. {row.ratio_high or 0:.2f}" if row.ratio_low is not None else "-",
                row.verdict.replace("_", " "),
            ]
            for row in comparison.tests
        ]
        out += [
            "  " + line for line in _table(["test", "config", "base", "head", "change", "interval", "verdict"], rows)
        ]

    if report.failed_runs:
        out += [
            "",
            f"Runs that did not exit 0 ({len(report.failed_runs)}): the command failed, not lagtrace; "
            "they are left out of every median",
        ]
        for failed in report.failed_runs[:5]:
            state = "timed out" if failed.timed_out else f"exit {failed.exit_code}"
            out.append(f"  {failed.config} run {failed.repetition}: {state}")
        tail = next((f.output_tail for f in report.failed_runs if f.output_tail), None)
        if tail:
            out += ["  last output:", *("    " + line for line in tail.rstrip().splitlines())]
    if report.evidence:
        out += ["", f"Evidence ({len(report.evidence)} entries from {len(report.evidence_runs)} evidence runs)"]
        for entry in report.evidence:
            out += render_evidence(entry)
    if report.evidence_runs:
        out += ["", "Evidence runs (the command's, or the test's, time under the probe vs its timing median)"]
        rows = []
        for run in report.evidence_runs:
            # Reports stored before observed_s existed have the process's wall time alone.
            observed = run.observed_s if "observed_s" in run.model_fields_set else run.wall_s
            median = run.timing_median_s
            rows.append(
                [
                    str(run.probe),
                    run.config + (f" [{run.test}]" if run.test else ""),
                    _seconds(run.wall_s),
                    _seconds(observed),
                    _seconds(median),
                    f"{observed / median:.1f}x" if observed is not None and median else "-",
                    "timed out" if run.timed_out else f"exit {run.exit_code}",
                ]
            )
        out += [
            "  " + line
            for line in _table(["probe", "config", "process wall", "observed", "timing median", "ratio", "end"], rows)
        ]
    for note in report.notes:
        out += ["", f"Note: {note}"]
    for place in report.measured_on:
        what = f"{place.phase} of shard {place.shard}" if place.shard else place.phase
        locks = [lock for lock in place.locks if lock != "node"]
        held = f"the locks of {', '.join(locks)}" if locks else "the node's measurement lock"
        out += ["", f"The {what} ran on node {place.node}, holding {held}"]
    return "\n".join(out) + "\n"


def _unfinished(job: ReportJob) -> list[str]:
    """What a job that did not finish says first: that it did not, and why (its error keeps
    its lines: an installer's or the command's output)."""
    status = job.status
    if status in ("queued", "running"):
        return [f"JOB {status.upper()}: not finished yet; what follows is what it measured so far"]
    prose, *output = (job.error or "no reason was recorded").split("\n")
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


def render_evidence(entry: ReportEvidence) -> list[str]:
    """The key lines of one evidence entry: top syscalls, threads and frames at the stall."""
    content = evidence_models.parse(entry.kind, entry.content)
    where = entry.config or "-"
    if entry.test:
        where += f" [{entry.test}]"
    head = f"  {entry.kind} ({where})"
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
            blocked = sorted(
                ((test_id, row) for test_id, row in tests.items() if row.loop_blocked_s),
                key=lambda item: -(item[1].loop_blocked_s or 0.0),
            )
            for test_id, row in blocked[:5]:
                lines.append(
                    f"      {test_id}: its event loop blocked {row.loop_blocked_s or 0:.3f} s "
                    f"by {row.loop_held or 0} callbacks, the longest {row.loop_longest_s or 0:.3f} s"
                )
        case _:
            lines.append(head)
    for note in entry.notes:
        lines.append(f"      note: {note.text}")
    # Artifacts are references the object store wrote, dicts in the contract too (ReportEvidence).
    for artifact in entry.artifacts:
        if artifact.get("key"):
            lines.append(
                f"      artifact {artifact['key']} ({artifact['size']} bytes, {artifact['stored_size']} stored)"
            )
        else:
            lines.append(f"      artifact {artifact['name']} not stored: {artifact.get('reason')}")
    return lines
