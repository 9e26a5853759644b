"""GitHub: webhook signatures, and the check run that carries a job's result back.

The check run speaks: a table of the tests slower than the pull request's base and of
the findings, annotations on the lines that define the tests, a "Rerun with other CPUs"
action, and a conclusion that follows triage and the project's `fail_on` policy.

The REST client is plain urllib on purpose: two endpoints, JSON in and out, and the
base URL comes from LAGTRACE_GITHUB_API_URL (GitHub Enterprise, or a test server).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import urllib.error
import urllib.request
from typing import Any

from services.diagnose.findings import SEVERITY_ORDER, format_seconds
from services.diagnose.report_parts import ReportFinding
from services.errors import LagtraceError
from services.jobs.pull_requests import FINDING_KIND as SLOWER_THAN_BASE
from services.jobs.report_schema import BaseChange, GateTestRow, Report, ReportGate, judged_runs
from services.jobs.spec import DEFAULT_FAIL_ON
from services.models import Job, JobKind, JobSource, JobStatus
from services.settings import Settings

SIGNATURE_PREFIX = "sha256="
SUMMARY_FINDINGS = 10
SUMMARY_ROWS = 20
STORED_JOBS_SHOWN = 3  # the newest; the report lists them all
# GitHub's limits: 65,535 characters of summary, 50 annotations per request, 64 kB a message.
MAX_SUMMARY_CHARS = 65_000
MAX_ANNOTATIONS = 50
MAX_ANNOTATION_CHARS = 4_000
RERUN_OTHER_CPUS = "rerun_other_cpus"


class GitHubError(LagtraceError):
    """GitHub's API refused or could not be reached; the notify step is retried later."""


def signature_valid(secret: str, body: bytes, header: str | None) -> bool:
    """X-Hub-Signature-256 over the raw body, compared in constant time."""
    if not header or not header.startswith(SIGNATURE_PREFIX):
        return False
    expected = SIGNATURE_PREFIX + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), header.encode("utf-8", "replace"))


def sign(secret: str, body: bytes) -> str:
    """The header GitHub would send for ``body`` (used by tests and by `lagtrace` tooling)."""
    return SIGNATURE_PREFIX + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class GitHubClient:
    def __init__(self, settings: Settings, timeout_s: float = 10.0):
        self.base_url = settings.github_api_url.rstrip("/")
        self.token = settings.github_token.get_secret_value() if settings.github_token else None
        self.timeout_s = timeout_s

    def request(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        headers = {
            "Accept": "application/vnd.github+json",
            "Content-Type": "application/json",
            "User-Agent": "lagtrace",
            "X-GitHub-Api-Version": "2022-11-28",
        }
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(
            self.base_url + path, data=json.dumps(body).encode(), method=method, headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            raise GitHubError(
                f"{method} {path}: HTTP {exc.code}: {exc.read()[:300].decode(errors='replace')}"
            ) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise GitHubError(f"{method} {path}: {exc}") from None

    def create_check_run(self, repository: str, body: dict[str, Any]) -> int:
        return int(self.request("POST", f"/repos/{repository}/check-runs", body)["id"])

    def update_check_run(self, repository: str, check_run_id: int, body: dict[str, Any]) -> None:
        self.request("PATCH", f"/repos/{repository}/check-runs/{check_run_id}", body)


def dashboard_url(settings: Settings, job: Job) -> str:
    return f"{settings.public_url.rstrip('/')}/jobs/{job.id}"


# --- What the check run says ----------------------------------------------------------


def policy(source: JobSource | None) -> list[str]:
    """What fails the check run: the job's .lagtrace.yml `fail_on`, else the default."""
    return list(source.fail_on) if source is not None and source.fail_on is not None else list(DEFAULT_FAIL_ON)


def is_open(finding: ReportFinding) -> bool:
    """Triaged problems (acknowledged, muted, fixed) do not count against a check run."""
    return finding.status == "new"


def failing(report: Report | None, fail_on: list[str]) -> list[ReportFinding]:
    """The open findings that ``fail_on`` makes fail the check run."""
    if not report:
        return []
    ranks = [SEVERITY_ORDER[name] for name in fail_on if name in SEVERITY_ORDER]
    worst_allowed = max(ranks) if ranks else -1
    chosen = []
    for finding in report.findings:
        if not is_open(finding):
            continue
        regression = finding.kind == SLOWER_THAN_BASE or finding.regression
        if ("regression" in fail_on and regression) or SEVERITY_ORDER.get(finding.severity, 9) <= worst_allowed:
            chosen.append(finding)
    return chosen


def conclusion(job: Job, report: Report | None, fail_on: list[str] | None = None) -> str:
    """failure when the project's policy says so; neutral for open findings it lets pass."""
    if job.status is JobStatus.cancelled:
        return "cancelled"
    if job.status is JobStatus.failed:
        return "failure"
    if failing(report, DEFAULT_FAIL_ON if fail_on is None else fail_on):
        return "failure"
    return "neutral" if report and any(is_open(f) for f in report.findings) else "success"


def check_run_body(settings: Settings, job: Job, source: JobSource, report: Report | None) -> dict[str, Any]:
    """The check run's payload (the JSON edge: the report is read typed up to here)."""
    body: dict[str, Any] = {
        "name": settings.github_check_name,
        "head_sha": source.github_head_sha,
        "details_url": dashboard_url(settings, job),
        "external_id": str(job.id),
    }
    if job.status in (JobStatus.queued, JobStatus.running):
        if job.kind is JobKind.gate:
            what = "Comparing each test with its history"
        else:
            what = "Screening CPU configurations" + (" against the base commit" if source.base_commit_sha else "")
        return {
            **body,
            "status": "in_progress",
            "output": {"title": what, "summary": f"Job {job.id}: {', '.join(c.label for c in job.configs)}"},
        }
    fail_on = policy(source)
    output: dict[str, Any] = {"title": _title(job, report), "summary": summary(settings, job, report, fail_on)}
    annotations = check_annotations(report, fail_on)
    if annotations:
        output["annotations"] = annotations
    return {
        **body,
        "status": "completed",
        "conclusion": conclusion(job, report, fail_on),
        "output": output,
        "actions": [
            {
                "label": "Rerun other CPUs",
                "description": "Screen again on more CPU configurations",
                "identifier": RERUN_OTHER_CPUS,
            }
        ]
        if job.status is JobStatus.done
        else [],
    }


def _title(job: Job, report: Report | None) -> str:
    if job.status is not JobStatus.done:
        return f"lagtrace job {job.id} {job.status.value}"
    findings = report.findings if report else []
    regressed = [t for t in _compared(report) if t.verdict == "regressed" and t.test is not None]
    parts = []
    if regressed:
        names = list(dict.fromkeys(t.test for t in regressed))
        parts.append(f"{len(names)} test{'s' if len(names) != 1 else ''} slower than base")
    gate = report.gate if report else None
    behind = [t for t in gate.tests if t.verdict == "regressed"] if gate else []
    if behind:
        parts.append(f"{len(behind)} test{'s' if len(behind) != 1 else ''} slower than history")
    open_count = sum(is_open(f) for f in findings)
    if findings:
        parts.append(f"{open_count} open latency finding{'s' if open_count != 1 else ''} of {len(findings)}")
    return "; ".join(parts) if parts else "No latency findings"


def _compared(report: Report | None) -> list[BaseChange]:
    comparison = report.base_comparison if report else None
    return comparison.tests if comparison else []


def _seconds_or_none(value: float | None) -> str:
    return "-" if value is None else format_seconds(value)


def _ratio(row: BaseChange) -> str:
    if row.ratio is None:
        return "-"
    return f"{row.ratio:.2f}x ({row.ratio_low or 0:.2f} to {row.ratio_high or 0:.2f})"


# The smallest slowdown the comparison finds with 80 % power on a quiet node (2.66 %
# coefficient of variation) at the default repeats, and the false "regressed" rate per
# test beside it: tests/bench/bench_pr_power.py, over suites of 500 tests.
POWER_80_QUIET_RATIO = 1.3


def _ruled_out(rows: list[BaseChange]) -> list[str]:
    """What an "unchanged" verdict rules out: a slowdown beyond its interval's upper end."""
    highs = sorted(r.ratio_high for r in rows if r.verdict == "unchanged" and r.ratio_high is not None)
    if not highs:
        return []
    median = highs[len(highs) // 2]
    return [
        f"Unchanged rules out a slowdown above the upper end of each 95 % interval: {median:.2f}x for the median "
        f"unchanged test, {highs[-1]:.2f}x at worst. On a quiet node the comparison finds a "
        f"{POWER_80_QUIET_RATIO:g}x slowdown with 80 % power at the default repeats (benchmark: pr_power).",
        "",
    ]


def summary(settings: Settings, job: Job, report: Report | None, fail_on: list[str] | None = None) -> str:
    fail_on = DEFAULT_FAIL_ON if fail_on is None else fail_on
    lines = [f"**lagtrace job [{job.id}]({dashboard_url(settings, job)})**: {job.status.value}", ""]
    if job.error:
        lines += [f"Error: {_code(job.error[:500], in_table=False)}", ""]
    if not report:
        return "\n".join(lines)
    comparison = report.base_comparison
    if comparison:
        rows = comparison.tests
        counts = comparison.counts
        lines += [
            f"### Compared with base {_code(comparison.base_commit[:12], in_table=False)}",
            "",
            ", ".join(f"{counts[v]} {v.replace('_', ' ')}" for v in counts) + " (test × configuration)",
            "",
        ]
        lines += _ruled_out(rows)
        shown = [r for r in rows if r.verdict != "unchanged"][:SUMMARY_ROWS]
        if shown:
            lines += [
                "| test | configuration | base | head | head/base (95 % interval) | verdict |",
                "|---|---|---|---|---|---|",
            ]
            for r in shown:
                test = _code(r.test or "(whole command)")
                lines.append(
                    f"| {test} | {_code(r.config)} | {_seconds_or_none(r.base_median_s)} "
                    f"| {format_seconds(r.head_median_s)} | {_ratio(r)} | **{r.verdict.replace('_', ' ')}** |"
                )
            lines.append("")
    if report.gate:
        lines += _gate_summary(report.gate)
    findings = report.findings
    if findings:
        blocking = {f.id for f in failing(report, fail_on)}
        lines += ["### Findings", "", "| severity | finding | test | triage |", "|---|---|---|---|"]
        for f in findings[:SUMMARY_FINDINGS]:
            state = "**fails the check**" if f.id in blocking else _text(f.status)
            lines.append(
                f"| {_text(f.severity)} | {_code(f.kind)}: {_text(f.title)} | {_code(f.test or '')} | {state} |"
            )
        if len(findings) > SUMMARY_FINDINGS:
            lines.append(f"| | and {len(findings) - SUMMARY_FINDINGS} more on the dashboard | | |")
        lines.append("")
    # Causes proven by turning their knob (services/measure/confirm.py), and those it did not bear out.
    tried = [d for d in report.diagnoses if d.knob]
    if tried:
        lines += ["### Causes tested by turning their knob", ""]
        for d in tried:
            kind = _code(d.cause.kind, in_table=False) + " " if d.cause else ""
            lines.append(f"- {_code(d.test or 'the whole command', in_table=False)}: {kind}{_text(d.knob or '')}")
        lines.append("")
    lines += ["### Configurations", "", "| configuration | runs | median wall |", "|---|---|---|"]
    for config in report.configs:
        median = config.wall_s.median if config.wall_s else None
        lines.append(
            f"| {_code(config.label)} | {len(config.runs)} | {f'{median:.3f} s' if median is not None else '-'} |"
        )
    lines.append("")
    lines += [f"- Note: {_text(note)}" for note in report.notes]
    lines.append(
        f"\nFails on: {', '.join(fail_on) or 'nothing'} (`fail_on` in .lagtrace.yml); muted and acknowledged "
        "findings never fail it."
    )
    return "\n".join(lines)[:MAX_SUMMARY_CHARS]


def _gate_summary(gate: ReportGate) -> list[str]:
    """A gate's verdicts against history (services/jobs/gate.py): counts, then the tests that
    did not stay unchanged."""
    where = f"the {_code(gate.branch, in_table=False)} branch's history" if gate.branch else "history"
    lines = [
        f"### Against {where} with {_code(gate.config, in_table=False)}",
        "",
        ", ".join(f"{n} {verdict.replace('_', ' ')}" for verdict, n in sorted(gate.counts.items())) + " (tests)",
        "",
    ]
    shown = [t for t in gate.tests if t.verdict != "unchanged"][:SUMMARY_ROWS]
    if shown:
        lines += [
            "| test | stored runs (from jobs) | stored median | fresh runs judged | change (interval) | verdict |",
            "|---|---|---|---|---|---|",
        ]
        for t in shown:
            # The runs the verdict rests on, as the finding's annotation counts them.
            fresh = ", ".join(format_seconds(s) for s in judged_runs(t.fresh_s))
            lines.append(
                f"| {_code(t.test)} | {_stored_runs(t)} | {_seconds_or_none(t.stored_median_s)} | {fresh} "
                f"| {_change(t)} | **{t.verdict.replace('_', ' ')}** |"
            )
        lines.append("")
    return lines


def _stored_runs(test: GateTestRow) -> str:
    """How many stored runs, and the jobs that measured them (newest first), so a reader
    can open the history the verdict stands on."""
    if not test.jobs:
        return str(test.stored)
    shown = ", ".join(f"#{job}" for job in test.jobs[:STORED_JOBS_SHOWN])
    more = f" and {len(test.jobs) - STORED_JOBS_SHOWN} more" if len(test.jobs) > STORED_JOBS_SHOWN else ""
    return f"{test.stored} ({shown}{more})"


def _change(test: GateTestRow) -> str:
    """Fresh over stored, with the interval the sequential rule stopped on
    (services/measure/sequential.py shift_interval)."""
    if test.ratio is None:
        return "-"
    if test.ratio_low is None or test.ratio_high is None:
        return f"{test.ratio:.2f}x"
    return f"{test.ratio:.2f}x ({test.ratio_low:.2f}x to {test.ratio_high:.2f}x)"


# Test ids, titles, notes and errors come from the repository's code: what they hold must
# read as text in the check run, never as Markdown (a backtick closing a code span, a pipe
# ending a table cell, an image, a link, a heading, raw HTML).
MARKDOWN_PUNCTUATION = re.compile(r"[!-/:-@\[-`{-~]")  # every ASCII punctuation character
BACKTICKS = re.compile(r"`+")


def _one_line(text: str) -> str:
    return " ".join(text.splitlines())


def _text(text: str) -> str:
    """Plain text: each punctuation character backslash-escaped (CommonMark reads any as
    literal), a pipe included, so it also stays inside its table cell."""
    return MARKDOWN_PUNCTUATION.sub(lambda m: "\\" + m.group(), _one_line(text))


def _code(text: str, *, in_table: bool = True) -> str:
    """An inline code span that the text cannot close: fenced by one more backtick than its
    longest run, padded when it starts or ends with one. In a table cell pipes are escaped
    (GFM unescapes them inside code spans there); nothing else is read in a code span."""
    text = _one_line(text)
    if not text:
        return ""
    fence = "`" * (max((len(run) for run in BACKTICKS.findall(text)), default=0) + 1)
    pad = " " if text[0] == "`" or text[-1] == "`" or (text[0] == " " and text[-1] == " ") else ""
    return f"{fence}{pad}{text.replace('|', chr(92) + '|') if in_table else text}{pad}{fence}"


def test_location(report: Report, test_id: str | None) -> tuple[str, int] | None:
    """The file (from the node id, as pytest's rootdir names it) and line of a test."""
    if not test_id or "::" not in test_id:
        return None
    path = test_id.split("::", 1)[0]
    if not path.endswith(".py") or path.startswith("/") or ".." in path.split("/"):
        return None
    lines = {t.id: t.line for t in report.tests}
    return path, lines.get(test_id) or 1


def check_annotations(report: Report | None, fail_on: list[str]) -> list[dict[str, Any]]:
    """One annotation per open finding on a test, on the line that defines it."""
    if not report:
        return []
    blocking = {f.id for f in failing(report, fail_on)}
    annotations = []
    for finding in report.findings:
        where = test_location(report, finding.test) if is_open(finding) else None
        if where is None:
            continue
        path, line = where
        annotations.append(
            {
                "path": path,
                "start_line": line,
                "end_line": line,
                "annotation_level": "failure" if finding.id in blocking else "warning",
                "title": f"{finding.kind}: {finding.test}"[:255],
                "message": f"{finding.title}\n{finding.detail}"[:MAX_ANNOTATION_CHARS],
            }
        )
    return annotations[:MAX_ANNOTATIONS]
