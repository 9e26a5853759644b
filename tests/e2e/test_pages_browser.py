"""The test catalogue, the finding page and phone width in headless Chromium, against a
real `lagtrace serve` whose database holds stored hand-off jobs (tests/web/sample_data):
the pages are under test here, not the engine (test_dashboard_browser.py runs jobs).

Screenshots go to the folder printed at the start (run with -s to see it).
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest
from sqlalchemy import select

from services.db import make_engine, make_session_factory
from services.jobs.summaries import refresh_catalogue
from services.models import Finding, JobSource
from services.settings import Settings
from tests.e2e.test_dashboard_browser import browser, server, shots, sign_in  # noqa: F401 (fixtures)
from tests.web.sample_data import TEST_SLOW, store_handoff_job, store_pull_request_job

pytestmark = pytest.mark.browser
PHONE = {"width": 375, "height": 740}


@pytest.fixture(scope="module")
def stored(server):  # noqa: F811
    """Four finished hand-off jobs on two branches and one of a pull request (branch
    faster-ws, with base runs), stored straight into the server's database."""
    settings = Settings(
        database_url=server.env["LAGTRACE_DATABASE_URL"], artifact_dir=Path(server.env["LAGTRACE_ARTIFACT_DIR"])
    )
    engine = make_engine(settings)
    start = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    with make_session_factory(engine)() as session:
        ids = []
        for i, branch in enumerate(["main", "main", "feature/ws", "main"]):
            job = store_handoff_job(session, settings, created_at=start + dt.timedelta(days=i))
            session.get(JobSource, job.id).ref = f"refs/heads/{branch}"
            ids.append(job.id)
        session.commit()
        futex = session.scalar(select(Finding.id).where(Finding.job_id == ids[-1], Finding.kind == "futex_storm"))
        pull_request, _ = store_pull_request_job(session, settings)
        session.commit()
        # What each job's finish does for the catalogue (the pages only read it).
        refresh_catalogue(session, [pull_request.project_id])
        session.commit()
        pull_request_id = pull_request.id
    engine.dispose()
    return {"jobs": ids, "futex": futex, "pull_request": pull_request_id}


def _context(browser, server, **options):  # noqa: F811
    return browser.new_context(base_url=server.url, **options)


def _no_page_scroll(page) -> None:
    width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], f"{page.url}: the page is {width[0]} px wide in a {width[1]} px window"


def test_catalogue_draws_a_trend_chart_per_branch(browser, server, shots, stored):  # noqa: F811
    context = _context(browser, server, viewport={"width": 1360, "height": 900})
    page = context.new_page()
    try:
        sign_in(page)
        page.click("header nav >> text=Tests")
        page.wait_for_selector("table.catalogue")
        page.screenshot(path=shots / "20-tests.png", full_page=True)
        row = page.locator("table.catalogue tbody tr", has_text=TEST_SLOW)
        assert row.count() == 1
        assert "1.90 s / 2.03 s" in row.inner_text() and "feature/ws" in row.inner_text()
        page.fill("input[name=q]", "two_clients")
        page.click("form.filters button[type=submit]")
        page.wait_for_url(re.compile(r"q=two_clients"))
        assert page.locator("table.catalogue tbody tr").count() == 1
        page.click(f"table.catalogue a:has-text('{TEST_SLOW}')")
        page.wait_for_selector("svg.plot.trend")
        charts = page.locator("section.trend-branch")
        assert charts.count() == 3  # main, feature/ws and the pull request's head branch, faster-ws
        main = page.locator("section.trend-branch", has_text="main")
        # Two configurations x (p50 + p95) lines over the three main jobs.
        assert main.locator("path.series").count() == 4
        assert main.locator("path.p95").count() == 2
        assert main.locator("circle.series-dot").count() == 3 * 4
        page.screenshot(path=shots / "21-test-entry-trend.png", full_page=True)
        main.locator("svg").screenshot(path=shots / "22-trend-chart-main.png")
    finally:
        context.close()


def test_finding_page_puts_slow_and_fast_evidence_side_by_side(browser, server, shots, stored):  # noqa: F811
    context = _context(browser, server, viewport={"width": 1360, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    try:
        sign_in(page)
        page.goto(f"/findings/{stored['futex']}")
        story = page.locator("#story")
        assert "95.0× slower" in story.inner_text()
        strace = page.locator("details.pair[data-kind=strace]")
        assert strace.get_attribute("open") is not None
        slow, fast = strace.locator(".side.slow"), strace.locator(".side.fast")
        assert "futex" in slow.locator("table.strace tbody tr").first.inner_text()
        assert "read" in fast.locator("table.strace tbody tr").first.inner_text()
        # Side by side: the fast column starts to the right of the slow one, at the same height.
        left, right = slow.bounding_box(), fast.bounding_box()
        assert right["x"] >= left["x"] + left["width"] - 1 and abs(right["y"] - left["y"]) < 5
        # Evidence the finding does not cite is folded.
        assert page.locator("details.pair[data-kind=gdb]").get_attribute("open") is None
        strace.screenshot(path=shots / "23-finding-strace-side-by-side.png")
        page.screenshot(path=shots / "24-finding.png", full_page=True)

        # The interactive flame graph: drawn from the profile, zooms on click, searches.
        flame = page.locator(".flame[data-ready=true]")
        flame.wait_for(timeout=15_000)
        frames = flame.locator(".flame-chart svg g.frame")
        assert frames.count() >= 4
        before = flame.locator(".flame-chart svg g.frame rect").first.bounding_box()["width"]
        leaf = flame.locator(".flame-chart svg g.frame", has_text="receive").first
        leaf.click()
        page.wait_for_timeout(600)  # the zoom transition
        assert leaf.locator("rect").bounding_box()["width"] >= before * 0.99
        flame.locator("input[name=term]").fill("call_soon")
        details = flame.locator(".flame-details")
        page.wait_for_function("document.querySelector('.flame-details').textContent.includes('search')")
        assert "2 of 3 total samples" in details.inner_text()
        flame.screenshot(path=shots / "25-finding-flame-graph.png")
        assert not errors, errors  # CSP or script errors would show here

        # The evidence entry's own page draws it too (it loaded no d3 and said "needs its script").
        page.goto(flame.get_attribute("data-profile").removesuffix("/flame.json"))
        alone = page.locator(".flame[data-ready=true]")
        alone.wait_for(timeout=15_000)
        assert alone.locator(".flame-chart svg g.frame").count() >= 4
        assert "needs its script" not in page.locator(".flame-details").inner_text()
        assert not errors, errors
    finally:
        context.close()


def test_a_pull_requests_job_compares_each_test_with_the_base(browser, server, shots, stored):  # noqa: F811
    context = _context(browser, server, viewport={"width": 1360, "height": 900})
    page = context.new_page()
    try:
        sign_in(page)
        page.goto(f"/jobs/{stored['pull_request']}")
        comparison = page.locator("#base-comparison")
        comparison.wait_for()
        assert "Compared with base" in comparison.inner_text()
        assert page.locator("a[href='https://github.com/octo/demo/pull/12']").count() >= 1
        # Regressions first: the slow test on one core, 4 ms on the base, 20 ms on the head.
        first = comparison.locator("tbody tr").first
        assert TEST_SLOW in first.inner_text() and "regressed" in first.inner_text()
        assert "cpuset=0" in first.inner_text()
        # Unchanged pairs are counted, not listed (a 5,000-test job's page stays short).
        assert comparison.locator("tbody tr", has_text="unchanged").count() == 0
        assert "more unchanged" in comparison.locator("#unchanged-hidden").inner_text()
        comparison.screenshot(path=shots / "26-pull-request-compared-with-base.png")
        page.screenshot(path=shots / "27-pull-request-job.png", full_page=True)
    finally:
        context.close()


@pytest.mark.parametrize("javascript", [True, False], ids=["js", "no-js"])
def test_phone_width_has_no_horizontal_page_scroll(browser, server, shots, stored, javascript):  # noqa: F811
    context = _context(browser, server, viewport=PHONE, java_script_enabled=javascript, is_mobile=True)
    page = context.new_page()
    try:
        sign_in(page)
        job = stored["jobs"][-1]
        pages = {
            "inbox": "/",
            "jobs": "/jobs",
            "job": f"/jobs/{job}",
            "tests": "/tests",
            "test-entry": f"/tests/entry?project=1&id={TEST_SLOW}",
            "job-test": f"/jobs/{job}/test?id={TEST_SLOW}",
            "finding": f"/findings/{stored['futex']}",
        }
        for name, path in pages.items():
            page.goto(path)
            _no_page_scroll(page)
            page.screenshot(path=shots / f"30-phone-{'js' if javascript else 'nojs'}-{name}.png", full_page=True)
        if javascript:
            # The nav folds behind a button, and opens.
            assert not page.locator("header nav").is_visible()
            page.click("header .nav-toggle")
            assert page.locator("header nav a", has_text="Tests").is_visible()
            _no_page_scroll(page)
            page.screenshot(path=shots / "31-phone-nav-open.png")
        else:
            assert page.locator("header nav a", has_text="Tests").is_visible()
        # A wide table scrolls inside its own box.
        page.goto(f"/jobs/{job}")
        matrix = page.locator("table.matrix")
        sizes = matrix.evaluate("t => [t.scrollWidth, t.clientWidth]")
        assert sizes[0] > sizes[1], sizes  # wider than the screen, so it scrolls in place
    finally:
        context.close()
