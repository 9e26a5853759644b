"""What a finished job's check run says: conclusion (triage, policy), summary, annotations, action."""

from __future__ import annotations

from typing import Any

import pytest
from markdown_it import MarkdownIt

from services.github.client import RERUN_OTHER_CPUS, check_run_body, conclusion
from services.jobs.report_schema import Report, parse_report
from services.models import Job, JobSource, JobStatus, Project
from services.settings import Settings
from tests.unit.services.jobs.test_report_schema import _minimal_report

SETTINGS = Settings(database_url="sqlite://", public_url="http://lagtrace.test")
SLOW = "tests/test_speed.py::test_slow"


def finding(id: int, severity: str, status: str = "new", kind: str = "cpu_sensitivity", **extra) -> dict[str, Any]:
    return {
        "id": id,
        "kind": kind,
        "severity": severity,
        "title": f"finding {id}",
        "detail": "why",
        "config": "cpuset=0",
        "test": SLOW,
        "metrics": {},
        "evidence": [],
        "fingerprint": f"f{id}",
        "status": status,
        "regression": False,
        **extra,
    }


RUN = {
    "wall_s": 0.5,
    "user_s": 0.4,
    "sys_s": 0.1,
    "max_rss_kb": 10_000,
    "voluntary_ctx_switches": 10,
    "involuntary_ctx_switches": 1,
    "exit_code": 0,
    "timed_out": False,
    "nr_periods": None,
    "nr_throttled": None,
    "throttled_s": None,
    "foreign_cpus": 0.0,
    "read_syscalls": None,
    "read_bytes": None,
}


def report(*findings: dict[str, Any], comparison: dict | None = None, **changes) -> Report:
    interval = {"median": 0.5, "ci_low": 0.5, "ci_high": 0.5, "n": 5, "confidence": 0.94}
    fields = {
        "findings": list(findings),
        "tests": [{"id": SLOW, "line": 12, "configs": []}],
        "configs": [{"label": "cpuset=0", "cpus": None, "cpuset": "0", "runs": [RUN] * 5, "wall_s": interval}],
        "base_comparison": comparison,
    }
    return parse_report(_minimal_report(**{**fields, **changes}))


def done_job() -> Job:
    return Job(id=3, status=JobStatus.done, project=Project(name="octo/demo"), configs=[], command=["pytest"])


def source(fail_on: list[str] | None = None) -> JobSource:
    return JobSource(job_id=3, github_head_sha="a" * 40, base_commit_sha="b" * 40, fail_on=fail_on)


@pytest.mark.parametrize(
    "statuses,expected",
    [
        (["new"], "failure"),
        (["muted"], "success"),
        (["acknowledged"], "success"),
        (["muted", "acknowledged"], "success"),
        (["muted", "new"], "failure"),
    ],
)
def test_muted_and_acknowledged_high_findings_do_not_fail_the_check(statuses, expected):
    # The bug: "With every high finding muted, the pull request's check run still fails".
    found = [finding(i, "high", status) for i, status in enumerate(statuses)]
    assert conclusion(done_job(), report(*found)) == expected


def test_the_policy_decides_what_fails_and_open_findings_it_lets_pass_are_neutral():
    medium = report(finding(1, "medium"))
    assert conclusion(done_job(), medium) == "neutral"  # default: regression, high
    assert conclusion(done_job(), medium, ["medium"]) == "failure"
    assert conclusion(done_job(), medium, ["high"]) == "neutral"
    slower = report(finding(2, "low", kind="slower_than_base"))
    assert conclusion(done_job(), slower) == "failure"
    assert conclusion(done_job(), slower, []) == "neutral"
    back = report(finding(3, "info", regression=True))
    assert conclusion(done_job(), back, ["regression"]) == "failure"
    assert conclusion(done_job(), report()) == "success"


def test_a_completed_check_run_names_the_slower_test_annotates_its_line_and_offers_a_rerun():
    row = {
        "test": SLOW,
        "config": "cpuset=0",
        "base_median_s": 0.03,
        "head_median_s": 0.15,
        "base_n": 5,
        "head_n": 5,
        "ratio": 5.0,
        "ratio_low": 4.6,
        "ratio_high": 5.4,
        "p_value": 0.008,
        "verdict": "regressed",
    }
    comparison = {
        "base_commit": "b" * 40,
        "base_ref": "main",
        "head_commit": "a" * 40,
        "tests": [row],
        "counts": {"regressed": 1, "improved": 0, "unchanged": 0, "too_noisy": 0},
    }
    slower = finding(5, "medium", kind="slower_than_base")
    muted = finding(6, "high", "muted", test="tests/test_speed.py::test_other")
    body = check_run_body(SETTINGS, done_job(), source(), report(slower, muted, comparison=comparison))
    assert body["status"] == "completed" and body["conclusion"] == "failure"
    summary = body["output"]["summary"]
    assert f"`{SLOW}`" in summary and "5.00x (4.60 to 5.40)" in summary and "**regressed**" in summary
    assert "**fails the check**" in summary and "| muted |" in summary
    assert body["output"]["title"].startswith("1 test slower than base")
    [annotation] = body["output"]["annotations"]  # the muted finding is not annotated
    assert annotation["path"] == "tests/test_speed.py" and annotation["start_line"] == 12
    assert annotation["annotation_level"] == "failure" and SLOW in annotation["title"]
    [action] = body["actions"]
    assert action["identifier"] == RERUN_OTHER_CPUS
    # GitHub's limits on a check run's action.
    assert len(action["label"]) <= 20 and len(action["description"]) <= 40 and len(action["identifier"]) <= 20


def test_findings_on_no_file_get_no_annotation():
    command = finding(1, "high", test=None)
    outside = finding(2, "high", test="../etc/x.py::t")
    body = check_run_body(SETTINGS, done_job(), source(), report(command, outside))
    assert "annotations" not in body["output"]


def test_text_from_the_repository_cannot_break_out_of_the_summarys_markdown():
    # pytest ids, finding titles, notes and errors carry whatever the repository's code wrote.
    # Rendered by a CommonMark parser with GFM tables (as GitHub reads check-run summaries),
    # each must come out as the same text in its own cell: no image, link, HTML or heading.
    hostile_test = "tests/t.py::test_x[a` | ![p](https://evil.example/p.png) <img src=x> ``b\\|]"
    title = "slow `x` | ![i](https://evil.example/i.png) [click](https://evil.example) <b>b</b> *e*"
    note = "**all good** ![n](https://evil.example/n.png)\n### Fake heading"
    error = "exit 1: ``` `code` ``` <script>x</script> | [l](https://evil.example)"
    found = finding(1, "high", test=hostile_test, title=title)
    hostile = report(found, notes=[note], tests=[{"id": hostile_test, "line": 3, "configs": []}])
    job = done_job()
    job.status, job.error = JobStatus.failed, error
    summary = check_run_body(SETTINGS, job, source(), hostile)["output"]["summary"]

    tokens = MarkdownIt("commonmark").enable("table").parse(summary)
    inline = [child for token in tokens if token.children for child in token.children]
    links = [t.attrs["href"] for t in inline if t.type == "link_open"]
    assert links == ["http://lagtrace.test/jobs/3"], summary  # the dashboard's own, nothing else
    assert not [t.type for t in inline if t.type in ("image", "html_inline")], summary
    assert not [t.type for t in tokens if t.type == "html_block"], summary
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert headings == ["Findings", "Configurations"], summary
    codes = [t.content for t in inline if t.type == "code_inline"]
    assert error in codes and hostile_test in codes, codes
    # The findings table's row: severity, finding, test, triage, each in its own cell.
    cells: list[list] = []
    for token in tokens:
        if token.type == "tr_open":
            cells.append([])
        elif token.type == "inline" and token.level >= 4:  # in a th or td
            cells[-1].append(token)
    finding_row = next(r for r in cells if r and r[0].content == "high")
    assert len(finding_row) == 4
    rendered_title = "".join(c.content for c in finding_row[1].children if c.type in ("text", "code_inline"))
    assert rendered_title == f"cpu_sensitivity: {title}"
    assert [c.content for c in finding_row[2].children if c.type == "code_inline"] == [hostile_test]
    text = "".join(c.content for t in tokens if t.type == "inline" for c in t.children if c.type == "text")
    assert "**all good** ![n](https://evil.example/n.png) ### Fake heading" in text


def test_an_unchanged_verdict_says_which_slowdown_it_rules_out():
    def row(test: str, high: float) -> dict[str, Any]:
        return {
            "test": test,
            "config": "cpuset=0",
            "base_median_s": 0.1,
            "head_median_s": 0.1,
            "base_n": 5,
            "head_n": 5,
            "ratio": 1.0,
            "ratio_low": 0.95,
            "ratio_high": high,
            "p_value": 0.6,
            "verdict": "unchanged",
        }

    comparison = {
        "base_commit": "b" * 40,
        "base_ref": "main",
        "head_commit": "a" * 40,
        "tests": [row("tests/a.py::t", 1.04), row("tests/b.py::t", 1.07), row("tests/c.py::t", 1.21)],
        "counts": {"regressed": 0, "improved": 0, "unchanged": 3, "too_noisy": 0},
    }
    summary = check_run_body(SETTINGS, done_job(), source(), report(comparison=comparison))["output"]["summary"]
    assert "Unchanged rules out a slowdown above the upper end of each 95 % interval" in summary
    assert "1.07x for the median unchanged test, 1.21x at worst" in summary
    assert "1.3x slowdown with 80 % power" in summary


def test_a_test_new_on_the_head_is_listed_as_new_with_no_base():
    new_row = {
        "test": "tests/test_speed.py::test_added",
        "config": "cpuset=0",
        "base_median_s": None,
        "head_median_s": 0.25,
        "base_n": 0,
        "head_n": 5,
        "ratio": None,
        "ratio_low": None,
        "ratio_high": None,
        "p_value": None,
        "verdict": "new",
    }
    comparison = {
        "base_commit": "b" * 40,
        "base_ref": "main",
        "head_commit": "a" * 40,
        "tests": [new_row],
        "counts": {"regressed": 0, "improved": 0, "unchanged": 0, "too_noisy": 0, "new": 1},
    }
    body = check_run_body(SETTINGS, done_job(), source(), report(comparison=comparison))
    summary = body["output"]["summary"]
    assert "1 new" in summary
    [row] = [line for line in summary.splitlines() if "test_added" in line]
    assert "**new**" in row and row.count("| - |") >= 1


def test_a_check_run_in_progress_says_the_predicted_cost_and_the_time_left():
    import datetime as dt

    started = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=30)
    job = Job(
        id=3,
        status=JobStatus.running,
        project=Project(name="octo/demo"),
        configs=[],
        command=["pytest"],
        created_at=started,
    )
    unknown = check_run_body(Settings(), job, source(), None)
    assert unknown["status"] == "in_progress"
    assert "Predicted cost: unknown until the suite's first run." in unknown["output"]["summary"]
    job.predicted_s = 120.0
    summary = check_run_body(Settings(), job, source(), None)["output"]["summary"]
    left = int(summary.split("about 120 s, about ")[1].split(" s left")[0])
    assert 88 <= left <= 90, summary  # 120 s predicted, 30 s of it gone
