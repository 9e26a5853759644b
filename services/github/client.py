"""GitHub: webhook signatures, and the check run that carries a job's result back.

The check run speaks: a table of the tests slower than the pull request's base and of
the findings, annotations on the lines that define the tests, a "Rerun with other CPUs"
action, and a conclusion that follows triage and the project's `fail_on` policy. A bisect
job has a check run of its own beside the push's (bisect_check_run_body): the culprit, the
pairs judged and the cost, neutral whatever it found.

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
from services.jobs.bisect import CULPRIT, NO_CULPRIT
from services.jobs.pull_requests import FINDING_KIND as SLOWER_THAN_BASE
from services.jobs.report_schema import BaseChange, GateTestRow, Report, ReportGate, judged_runs
from services.jobs.spec import DEFAULT_FAIL_ON
from services.measure import budget
from services.models import Bisect, Job, JobKind, JobSource, JobStatus
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
# A bisect's check run: the pairs it judged shown in its summary (the rest on the dashboard),
# and how much of a commit's subject or a test id its one-line title keeps.
BISECT_PAIRS_SHOWN = 40
TITLE_PART_CHARS = 200


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


def check_run_body(
    settings: Settings, job: Job, source: JobSource, report: Report | None, bisect: Bisect | None = None
) -> dict[str, Any]:
    """The check run's payload (the JSON edge: the report is read typed up to here). A bisect
    job's is its own (``bisect``, its Bisect row: bisect_check_run_body)."""
    if job.kind is JobKind.bisect:
        return bisect_check_run_body(settings, job, source, bisect)
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
            "output": {
                "title": what,
                "summary": f"Job {job.id}: {', '.join(c.label for c in job.configs)}{_cost(job)}",
            },
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


def _cost(job: Job) -> str:
    """The in-progress summary's forecast (services/jobs/forecast.py): the latest prediction
    stored on the job and the time it leaves, or that it is not known yet."""
    if job.predicted_s is None:
        return ". Predicted cost: unknown until the suite's first run."
    elapsed = budget.job_wall_s(job) or 0.0
    return f". Predicted cost: about {job.predicted_s:.0f} s, about {max(0.0, job.predicted_s - elapsed):.0f} s left."


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


# --- A bisect's check run (docs/explanations/bisect.md, docs/guides/service.md) --------

SHA = re.compile(r"[0-9a-f]{7,64}")


def check_run_head_sha(source: JobSource, bisect: Bisect | None = None) -> str | None:
    """The commit a job's check run is on: the one pushed; for a bisect without one (asked
    for by hand), its bad end once the step resolved it. None: nothing to attach it to yet."""
    return source.github_head_sha or (bisect.bad_sha if bisect is not None else None)


def bisect_check_run_body(settings: Settings, job: Job, source: JobSource, bisect: Bisect | None) -> dict[str, Any]:
    """A bisect job's check run, named apart from the push's own (which it must not replace
    on the commit), on the bad end. Once the search ended it is neutral whatever it found
    (a culprit is information, it fails nothing); a failed or cancelled job is as any job's.
    No "Rerun other CPUs": a bisect measures one configuration (tests/unit/services/github/
    test_bisect_check_run.py)."""
    body: dict[str, Any] = {
        "name": f"{settings.github_check_name} bisect",
        "head_sha": check_run_head_sha(source, bisect),
        "details_url": dashboard_url(settings, job),
        "external_id": str(job.id),
    }
    output = {"title": _bisect_title(job, bisect), "summary": bisect_summary(settings, job, bisect)}
    if job.status in (JobStatus.queued, JobStatus.running):
        return {**body, "status": "in_progress", "output": output}
    return {
        **body,
        "status": "completed",
        "conclusion": "neutral" if job.status is JobStatus.done else conclusion(job, None),
        "output": output,
    }


def _clip(text: str, chars: int = TITLE_PART_CHARS) -> str:
    text = _one_line(text).strip()
    return text if len(text) <= chars else text[: chars - 1] + "…"


def _bisect_config(job: Job, result: dict[str, Any] | None) -> str:
    return job.configs[0].label if job.configs else str((result or {}).get("config") or "")


def _revision(asked: str, sha: str | None) -> str:
    """A revision as asked for, with the commit it resolved to (short) when that is news."""
    if sha is None or (SHA.fullmatch(asked) and sha.startswith(asked)):
        return asked[:10] if SHA.fullmatch(asked) else asked
    return f"{asked} ({sha[:10]})"


def _bisect_title(job: Job, bisect: Bisect | None) -> str:
    if bisect is None:
        return f"lagtrace bisect job {job.id} {job.status.value}"
    result, test = bisect.result, _clip(bisect.test_id or "the whole command")
    if job.status in (JobStatus.queued, JobStatus.running):
        return (
            f"Bisecting {test} in {_bisect_config(job, result)} between "
            f"{_revision(bisect.good, bisect.good_sha)} and {_revision(bisect.bad, bisect.bad_sha)}"
        )
    if job.status is not JobStatus.done:
        return f"Bisect {job.status.value}" + (f": {_clip(job.error)}" if job.error else "")
    if result is None:
        return "Bisect ended with no result"
    if result["verdict"] == CULPRIT:
        subject = f" {_clip(result['culprit_subject'])}" if result.get("culprit_subject") else ""
        ratio = f" ({result['ratio']:.2f}x)" if result["ratio"] is not None else ""
        return f"Culprit: {result['culprit'][:10]}{subject}{ratio}"
    if result["verdict"] == NO_CULPRIT:
        return f"No commit changed {test}"
    return f"Undecided: {_clip(result['reason'])}"


def bisect_summary(settings: Settings, job: Job, bisect: Bisect | None) -> str:
    """The request, the verdict with its ratio and interval, the commits measured, the pairs
    judged, the cost, and the job on the dashboard (services/jobs/bisect.py as_json's keys)."""
    url = dashboard_url(settings, job)
    lines = [f"**lagtrace bisect, job [{job.id}]({url})**: {job.status.value}", ""]
    if job.error:
        lines += [f"Error: {_code(job.error[:500], in_table=False)}", ""]
    if bisect is None:
        return "\n".join(lines)
    result = bisect.result
    lines += _bisect_request(job, bisect, result)
    if result is None:
        running = job.status in (JobStatus.queued, JobStatus.running)
        lines.append("The search is running: its verdict appears here when it ends." if running else "No result.")
        return "\n".join(lines)[:MAX_SUMMARY_CHARS]
    lines += _bisect_verdict(result)
    lines += _bisect_commits(result)
    lines += _bisect_pairs(result)
    cost = result["cost"]
    lines += [
        f"Cost: {cost['says']} (the wall time of the runs, each a whole pytest process).",
        "",
        f"Every run, and each commit's times plotted by commit: [the job on the dashboard]({url}).",
    ]
    return "\n".join(lines)[:MAX_SUMMARY_CHARS]


def _full(asked: str, sha: str | None) -> str:
    if sha is None or sha == asked:
        return _code(asked, in_table=False)
    return f"{_code(asked, in_table=False)} ({_code(sha, in_table=False)})"


def _bisect_request(job: Job, bisect: Bisect, result: dict[str, Any] | None) -> list[str]:
    commits = f": {result['range_commits']} commits along the first-parent line" if result else ""
    return [
        "### Request",
        "",
        f"- Test: {_code(bisect.test_id, in_table=False)}" if bisect.test_id else "- Timed: the whole command",
        f"- Configuration: {_code(_bisect_config(job, result), in_table=False)}",
        f"- Range: good {_full(bisect.good, bisect.good_sha)} .. bad {_full(bisect.bad, bisect.bad_sha)}{commits}",
        "",
    ]


def _bisect_ratio(ratio: float | None, low: float | None, high: float | None) -> str:
    if ratio is None:
        return "-"
    interval = f" ({low:.2f}x to {high:.2f}x)" if low is not None and high is not None else ""
    return f"{ratio:.2f}x{interval}"


def _bisect_verdict(result: dict[str, Any]) -> list[str]:
    verdict = result["verdict"]
    lines = [f"### Verdict: {verdict.replace('_', ' ')}", ""]
    if verdict != CULPRIT:
        return [*lines, _text(result["reason"]), ""]
    index, count = result["culprit_index"], result["range_commits"]
    subject = f" {_text(result['culprit_subject'])}" if result.get("culprit_subject") else ""
    ratio, low, high = result["ratio"], result["ratio_low"], result["ratio_high"]
    times = f": {ratio:.2f}x its parent {_code(result['culprit_parent'], in_table=False)}'s time" if ratio else ""
    if times and low is not None and high is not None:
        times += f", interval {low:.2f}x to {high:.2f}x"
    lines.append(
        f"{_code(result['culprit'], in_table=False)}{subject} (commit {index + 1} of {count}) made "
        f"{result.get('timed', 'the test')} {result['direction']}{times}."
    )
    if result["also"]:
        also = ", ".join(_code(sha[:10], in_table=False) for sha in result["also"])
        lines.append(f"\nAlso {result['direction']} than its parent: {also}.")
    return [*lines, ""]


def _bisect_commits(result: dict[str, Any]) -> list[str]:
    measured, count = result["commits"], result["range_commits"]
    lines = [
        f"### Commits measured ({len(measured)} of {count})",
        "",
        "| commit | sha | median | runs |",
        "|---|---|---|---|",
    ]
    for commit in measured[:BISECT_PAIRS_SHOWN]:
        culprit = " (culprit)" if commit["sha"] == result["culprit"] else ""
        lines.append(
            f"| {commit['index'] + 1} of {count} | {_code(commit['sha'][:10])}{culprit} "
            f"| {format_seconds(commit['median_s'])} | {len(commit['durations_s'])} |"
        )
    if len(measured) > BISECT_PAIRS_SHOWN:
        lines.append(f"| | and {len(measured) - BISECT_PAIRS_SHOWN} more on the dashboard | | |")
    return [*lines, ""]


def _bisect_pairs(result: dict[str, Any]) -> list[str]:
    pairs, count = result["pairs"], result["range_commits"]
    place = {commit["sha"]: commit["index"] + 1 for commit in result["commits"]}
    lines = [
        f"### Pairs judged ({len(pairs)})",
        "",
        "| earlier | later | runs each | later/earlier (interval) | verdict |",
        "|---|---|---|---|---|",
    ]
    for pair in pairs[:BISECT_PAIRS_SHOWN]:
        said = pair["direction"] or pair["verdict"]
        lines.append(
            f"| {_code(pair['good'][:10])} ({place.get(pair['good'], '?')} of {count}) "
            f"| {_code(pair['bad'][:10])} ({place.get(pair['bad'], '?')} of {count}) | {pair['runs']} "
            f"| {_bisect_ratio(pair['ratio'], pair['ratio_low'], pair['ratio_high'])} "
            f"| {f'**{said}**' if pair['direction'] else said} |"
        )
    if len(pairs) > BISECT_PAIRS_SHOWN:
        lines.append(f"| | and {len(pairs) - BISECT_PAIRS_SHOWN} more on the dashboard | | | |")
    return [*lines, ""]


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
