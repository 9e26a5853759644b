"""A bisect job's check run (services/github/client.py bisect_check_run_body): its own name
beside the push's, on the bad end, neutral whatever the search found; the request, the
verdict, the commits measured, the pairs judged and the cost in its summary. The results
are the search's own (tests/support/bisect_results.py), stored as the bisect step stores
them, never hand-written: a change of the result's shape breaks these tests."""

from __future__ import annotations

from typing import Any

import pytest
from markdown_it import MarkdownIt

from services.github.client import check_run_body, check_run_head_sha
from services.jobs.bisect import BisectResult, Budget
from services.models import Bisect, Job, JobConfig, JobKind, JobSource, JobStatus, Project
from services.settings import Settings
from tests.support.bisect_results import COMMITS, CONFIG, searched, step_at, stored

SETTINGS = Settings(database_url="sqlite://", public_url="http://lagtrace.test")
TEST = "tests/test_speed.py::test_slow"
PUSHED = "f" * 40
JOB_URL = "http://lagtrace.test/jobs/7"


def bisect_job(status: JobStatus = JobStatus.done, error: str | None = None) -> Job:
    return Job(
        id=7,
        kind=JobKind.bisect,
        status=status,
        error=error,
        project=Project(name="octo/demo"),
        configs=[JobConfig(position=0, label=CONFIG, cpuset="0")],
        command=["pytest"],
    )


def github_source(head_sha: str | None = PUSHED) -> JobSource:
    return JobSource(job_id=7, kind="git", github_repository="octo/demo", github_head_sha=head_sha)


def bisect_row(result: dict[str, Any] | None = None, *, resolved: bool = True, test: str = TEST) -> Bisect:
    return Bisect(
        job_id=7,
        test_id=test,
        good="v1.4",
        bad="main",
        good_sha=COMMITS[0] if resolved else None,
        bad_sha=COMMITS[-1] if resolved else None,
        result=result,
    )


def body_of(found: BisectResult | None, status: JobStatus = JobStatus.done, **job) -> dict[str, Any]:
    row = bisect_row(stored(found) if found is not None else None)
    return check_run_body(SETTINGS, bisect_job(status, **job), github_source(), None, row)


def pair_rows(summary: str) -> list[str]:
    table = summary.split("### Pairs judged", 1)[1].split("\n\n")[1]
    return table.splitlines()[2:]  # past the header and its rule


def test_a_culprit_is_named_in_the_title_with_its_ratio_and_the_check_run_is_neutral():
    found = searched(step_at(9))
    assert found.verdict == "culprit" and found.culprit == 9, found.reason
    body = body_of(found)
    # Its own check run beside the push's (same commit, another name), on the pushed commit.
    assert body["name"] == "lagtrace bisect" and body["head_sha"] == PUSHED
    assert body["details_url"] == JOB_URL and body["external_id"] == "7"
    assert body["status"] == "completed" and body["conclusion"] == "neutral"
    assert "actions" not in body  # no "Rerun other CPUs": a bisect measures one configuration
    assert found.ratio is not None and found.ratio_low is not None and found.ratio_high is not None
    assert body["output"]["title"] == f"Culprit: {COMMITS[9][:10]} change 9 ({found.ratio:.2f}x)"

    summary = body["output"]["summary"]
    assert summary.startswith(f"**lagtrace bisect, job [7]({JOB_URL})**: done")
    # The request: the test, the configuration, the two ends with the commits they resolved to.
    assert f"- Test: `{TEST}`" in summary and f"- Configuration: `{CONFIG}`" in summary
    assert f"good `v1.4` (`{COMMITS[0]}`) .. bad `main` (`{COMMITS[-1]}`): 16 commits" in summary
    # The verdict, its ratio and interval.
    assert "### Verdict: culprit" in summary
    assert (
        f"`{COMMITS[9]}` change 9 (commit 10 of 16) made the test slower: {found.ratio:.2f}x its parent "
        f"`{COMMITS[8]}`'s time, interval {found.ratio_low:.2f}x to {found.ratio_high:.2f}x." in summary
    )
    # Every commit measured, its median and runs; the culprit marked.
    measured = sorted({sha for sha, _ in found.runs}, key=COMMITS.index)
    assert f"### Commits measured ({len(measured)} of 16)" in summary
    assert f"| 10 of 16 | `{COMMITS[9][:10]}` (culprit) |" in summary
    assert f"| {len(found.durations(COMMITS[9]))} |" in summary
    # One row per pair judged, in the search's order, each with its runs and verdict.
    rows = pair_rows(summary)
    assert len(rows) == len(found.pairs) > 0
    for row, pair in zip(rows, found.pairs, strict=True):
        assert row.startswith(f"| `{COMMITS[pair.good][:10]}` ({pair.good + 1} of 16) | `{COMMITS[pair.bad][:10]}`")
        assert f"| {pair.runs} |" in row and (pair.direction or pair.judgement.verdict) in row
        assert pair.judgement.ratio is not None and f"{pair.judgement.ratio:.2f}x" in row
    [culprit_row] = [row for row, p in zip(rows, found.pairs, strict=True) if (p.good, p.bad) == (8, 9)]
    assert "**slower**" in culprit_row
    # The cost, and the job on the dashboard.
    assert f"\nCost: {found.cost()} (the wall time of the runs" in summary
    assert summary.rstrip().endswith(f"[the job on the dashboard]({JOB_URL}).")


def test_the_bad_end_carries_the_check_run_of_a_bisect_with_no_pushed_commit():
    # A bisect asked for by hand: no commit was pushed; the check run goes on the bad end
    # the step resolved, and until it did there is nothing to attach it to.
    row = bisect_row(stored(searched(step_at(9))))
    body = check_run_body(SETTINGS, bisect_job(), github_source(head_sha=None), None, row)
    assert body["head_sha"] == COMMITS[-1]
    assert check_run_head_sha(github_source(head_sha=None), bisect_row(resolved=False)) is None
    assert check_run_head_sha(github_source(head_sha=None), None) is None
    assert check_run_head_sha(github_source(), bisect_row(resolved=False)) == PUSHED


def test_no_culprit_names_the_test_and_says_why_the_ends_are_the_same():
    found = searched(lambda index: 0.1, seed=3)
    assert found.verdict == "no_culprit", found.reason
    body = body_of(found)
    assert body["conclusion"] == "neutral" and body["output"]["title"] == f"No commit changed {TEST}"
    summary = body["output"]["summary"]
    assert "### Verdict: no culprit" in summary and "the good and the bad end are the same" in summary
    assert "### Commits measured (2 of 16)" in summary and "(culprit)" not in summary
    [ends] = pair_rows(summary)
    assert ends.startswith(f"| `{COMMITS[0][:10]}` (1 of 16) | `{COMMITS[-1][:10]}` (16 of 16) | 5 |")
    assert ends.endswith("| same |")
    assert "Cost: 10 runs" in summary


@pytest.mark.parametrize(
    ("found", "says"),
    [
        (searched(step_at(9), budget=Budget(max_runs=17), seed=4), "the budget of 17 runs ran out"),
        (searched(step_at(9), fails_at=7), f"the test could not be measured at {COMMITS[7][:10]}: the test failed"),
    ],
    ids=["budget", "test-failed"],
)
def test_an_undecided_search_is_neutral_and_its_title_says_why(found: BisectResult, says: str):
    assert found.verdict == "undecided" and found.reason == says
    body = body_of(found)
    assert body["conclusion"] == "neutral" and body["output"]["title"] == f"Undecided: {says}"
    summary = body["output"]["summary"]
    assert "### Verdict: undecided" in summary and f"Cost: {len(found.runs)} runs" in summary
    # The reason is text, escaped as the module escapes text from the repository.
    assert says.replace(":", "\\:") in summary
    assert len(pair_rows(summary)) == len(found.pairs)


@pytest.mark.parametrize(
    ("status", "conclusion", "error"),
    [
        (JobStatus.failed, "failure", "good 'v1.4': no such commit, branch or tag in the repository"),
        (JobStatus.cancelled, "cancelled", "cancelled by alice"),
    ],
)
def test_a_failed_or_cancelled_bisect_concludes_as_any_job_and_says_why(status, conclusion, error):
    body = body_of(None, status, error=error)
    assert body["status"] == "completed" and body["conclusion"] == conclusion
    assert body["output"]["title"] == f"Bisect {status.value}: {error}"
    summary = body["output"]["summary"]
    assert f"Error: `{error}`" in summary and "- Test:" in summary
    assert "### Verdict" not in summary and "No result." in summary
    assert "actions" not in body


def test_while_it_runs_the_check_run_is_in_progress_and_names_the_test_and_the_range():
    queued = check_run_body(SETTINGS, bisect_job(JobStatus.queued), github_source(), None, bisect_row(resolved=False))
    assert queued["status"] == "in_progress" and "conclusion" not in queued
    assert queued["name"] == "lagtrace bisect" and queued["head_sha"] == PUSHED
    assert queued["output"]["title"] == f"Bisecting {TEST} in {CONFIG} between v1.4 and main"
    assert "The search is running" in queued["output"]["summary"]
    # Once the step resolved the ends, the title shows the commits they are.
    running = check_run_body(SETTINGS, bisect_job(JobStatus.running), github_source(), None, bisect_row())
    assert running["output"]["title"] == (
        f"Bisecting {TEST} in {CONFIG} between v1.4 ({COMMITS[0][:10]}) and main ({COMMITS[-1][:10]})"
    )
    # Revisions given as commits are shown short, once.
    row = bisect_row()
    row.good, row.bad = COMMITS[0], COMMITS[-1][:12]
    title = check_run_body(SETTINGS, bisect_job(JobStatus.running), github_source(), None, row)["output"]["title"]
    assert title == f"Bisecting {TEST} in {CONFIG} between {COMMITS[0][:10]} and {COMMITS[-1][:10]}"


def test_text_from_the_repository_cannot_break_out_of_the_bisect_summarys_markdown():
    # The test id and the culprit's subject line are the repository's: each must read as
    # text, never as a link, an image, HTML or a heading (as GitHub renders the summary).
    hostile_test = "tests/t.py::test_x[a` | ![p](https://evil.example/p.png) <img src=x> ``b\\|]"
    subject = "fix ![i](https://evil.example/i.png) [click](https://evil.example) <b>b</b>\n### Fake heading"
    found = searched(step_at(9))
    row = bisect_row(stored(found, subject=subject), test=hostile_test)
    body = check_run_body(SETTINGS, bisect_job(), github_source(), None, row)
    summary = body["output"]["summary"]

    tokens = MarkdownIt("commonmark").enable("table").parse(summary)
    inline = [child for token in tokens if token.children for child in token.children]
    links = {t.attrs["href"] for t in inline if t.type == "link_open"}
    assert links == {JOB_URL}, summary  # the dashboard's own, nothing else
    assert not [t.type for t in inline if t.type in ("image", "html_inline")], summary
    assert not [t.type for t in tokens if t.type == "html_block"], summary
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    measured = len({sha for sha, _ in found.runs})
    assert headings == [
        "Request",
        "Verdict: culprit",
        f"Commits measured ({measured} of 16)",
        f"Pairs judged ({len(found.pairs)})",
    ], headings
    assert hostile_test in [t.content for t in inline if t.type == "code_inline"]
    # The title is one line of plain text: the subject's first line break is a space.
    assert "\n" not in body["output"]["title"] and body["output"]["title"].startswith(f"Culprit: {COMMITS[9][:10]}")


def test_a_long_test_id_is_clipped_in_the_title_and_kept_whole_in_the_summary():
    long_test = "tests/test_params.py::test_case[" + "x" * 3000 + "]"
    row = bisect_row(stored(searched(lambda index: 0.1, seed=3)), test=long_test)
    body = check_run_body(SETTINGS, bisect_job(), github_source(), None, row)
    assert len(body["output"]["title"]) < 250 and body["output"]["title"].endswith("…")
    assert f"`{long_test}`" in body["output"]["summary"]
