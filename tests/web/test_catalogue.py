"""The test catalogue: every test a project ran, p50/p95 per configuration over time per
branch, flakiness, open findings, search and filters; fed from finished jobs."""

from __future__ import annotations

import datetime as dt
import random
import re

from sqlalchemy import select

from services.diagnose.findings import fingerprint
from services.jobs.summaries import percentile, refresh_catalogue
from services.models import Finding, JobSource, TriageStatus
from services.summary_models import CataloguedJob, CatalogueEntry
from tests.support import branch_history
from tests.web.sample_data import TEST_SLOW, TEST_STEADY, store_handoff_job


def _jobs(dashboard, branches: list[str | None]) -> list[int]:
    dashboard.add_user("ann", ["demo"])
    ids = []
    with dashboard.session_factory() as session:
        start = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
        for i, branch in enumerate(branches):
            job = store_handoff_job(session, dashboard.settings, created_at=start + dt.timedelta(days=i))
            source = session.get(JobSource, job.id)
            source.ref = branch
            ids.append(job.id)
        session.commit()
        # What each job's finish does (services/jobs/engine.py diagnose_phase): the pages only read.
        refresh_catalogue(session, [1])
        session.commit()
    assert dashboard.sign_in("ann").status_code == 302
    return ids


def test_percentile_interpolates_like_numpy():
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert abs(percentile([float(v) for v in range(1, 21)], 0.95) - 19.05) < 1e-9
    assert percentile([0.3], 0.95) == 0.3


def test_catalogue_lists_each_test_once_with_its_newest_percentiles(dashboard):
    _jobs(dashboard, ["refs/heads/main", "refs/heads/main", "feature"])
    html = dashboard.page("/tests")
    assert 'href="/tests"' in html and "aria-current" in html  # in the nav
    rows = re.findall(r"<tr>\s*<td><a href=\"/tests/entry.*?</tr>", html, re.S)
    assert len(rows) == 2  # two tests, not one row per job or configuration
    slow = next(row for row in rows if TEST_SLOW in row)
    # The newest job's median and p95 of the slow test: 20.0 ms / 21.8 ms pinned, 1.90 s / 2.03 s on two cores.
    assert "<code>cpuset=0</code> 20.0 ms / 21.8 ms" in slow
    assert "<code>cpuset=0-1</code> 1.90 s / 2.03 s" in slow
    assert ">3<" in slow  # three jobs ran it
    assert "main" in slow and "feature" in slow
    # Its open findings link their finding pages; the steady test has none.
    assert slow.count("/findings/") == 3
    steady = next(row for row in rows if TEST_STEADY in row)
    assert "none" in steady
    with dashboard.session_factory() as session:
        assert session.query(CataloguedJob).count() == 3
        assert session.query(CatalogueEntry).count() == 2 * 2 * 2  # tests x configurations x branches
    # A second refresh reads no job twice.
    with dashboard.session_factory() as session:
        assert refresh_catalogue(session, [1]) == 0
        assert sum(e.runs for e in session.query(CatalogueEntry)) == 3 * 2 * 5 * 2


def test_a_catalogue_view_writes_nothing(dashboard):
    """The summary is brought up to date when a job finishes; a GET only reads it (a job
    stored as finished without that step stays out of the list)."""
    _jobs(dashboard, ["main"])
    with dashboard.session_factory() as session:
        store_handoff_job(session, dashboard.settings)
        session.commit()
    dashboard.page("/tests")
    with dashboard.session_factory() as session:
        assert session.query(CataloguedJob).count() == 1
        assert refresh_catalogue(session, [1]) == 1


def test_catalogue_filters_and_search(dashboard):
    _jobs(dashboard, ["main", "feature"])
    assert TEST_STEADY not in dashboard.page("/tests?q=two_CLIENTS")
    assert TEST_SLOW in dashboard.page("/tests?q=two_CLIENTS")
    assert "No test matches" in dashboard.page("/tests?q=100%25")  # % is a character, not a wildcard
    assert TEST_SLOW in dashboard.page("/tests?branch=feature")
    assert "No test matches" in dashboard.page("/tests?branch=nope")
    assert "No test matches" in dashboard.page("/tests?config=cpus%3D3")
    assert TEST_SLOW in dashboard.page("/tests?config=cpuset%3D0")
    assert "No test matches" in dashboard.page("/tests?project=999")
    opened = dashboard.page("/tests?open=1")
    assert TEST_SLOW in opened and TEST_STEADY not in opened
    # Muting the newest finding of each problem closes it: the filter follows triage.
    with dashboard.session_factory() as session:
        for finding in session.query(Finding).all():
            finding.status = TriageStatus.muted
        session.commit()
    assert "No test matches" in dashboard.page("/tests?open=1")


def test_catalogue_pages(dashboard):
    _jobs(dashboard, ["main"])
    first = dashboard.page("/tests?per_page=1")
    assert "older →" not in first  # two tests fit on a page
    from web import catalogue

    with dashboard.session_factory() as session:
        rows, more = catalogue.catalogue(session, [1], per_page=1)
        assert len(rows) == 1 and more
        rest, more = catalogue.catalogue(session, [1], per_page=1, page=1)
        assert len(rest) == 1 and not more and rest[0].test_id != rows[0].test_id


def test_entry_plots_p50_and_p95_per_branch_and_counts_flaky_jobs(dashboard):
    ids = _jobs(dashboard, ["main", "main", "feature"])
    with dashboard.session_factory() as session:
        job_id = ids[1]
        session.add(
            Finding(
                job_id=job_id,
                kind="latency_flaky",
                severity="medium",
                title="runs vary 3x",
                detail="x",
                config_label="cpuset=0-1",
                test_id=TEST_SLOW,
                metrics={"ratio": 3.0},
                evidence_ids=[],
                fingerprint=fingerprint("demo", "latency_flaky", TEST_SLOW),
            )
        )
        session.commit()
    html = dashboard.page(f"/tests/entry?project=1&id={TEST_SLOW}")
    assert "flaky in 1 of them (33 %)" in html
    assert html.count('<svg class="plot trend"') == 2  # main and feature
    assert html.index("<code>feature</code>") < html.index("<code>main</code>")  # newest branch first
    assert 'class="series p95' in html and 'class="series s0"' in html
    assert "runs vary 3x" in html and "futex holds" in html
    assert "1.90 s / 2.03 s" in html
    assert dashboard.client.get("/tests/entry?project=1&id=nope").status_code == 404
    assert dashboard.client.get(f"/tests/entry?project=99&id={TEST_SLOW}").status_code == 404


def test_per_job_test_page_links_its_catalogue_entry_and_findings(dashboard):
    (job_id,) = _jobs(dashboard, ["main"])
    html = dashboard.page(f"/jobs/{job_id}/test?id={TEST_SLOW}")
    link = re.search(r'href="(/tests/entry\?project=1&amp;id=[^"]*test_two_clients)"', html)
    assert link, html
    assert TEST_SLOW in dashboard.page(link.group(1).replace("&amp;", "&"))
    assert html.count("/findings/") == 3


def test_the_trend_chart_marks_a_step_on_its_branch(dashboard):
    dashboard.add_user("ann", ["shop"])
    rng = random.Random(24)
    with dashboard.session_factory() as session:
        jobs = [branch_history.push(session, dashboard.settings, rng, n) for n in range(branch_history.STEP_AT + 4)]
        session.commit()
        finding = session.query(Finding).filter_by(kind="slower_since").one()
        assert finding.job_id == jobs[branch_history.STEP_AT].id
    assert dashboard.sign_in("ann").status_code == 302
    html = dashboard.page(f"/tests/entry?project=1&id={branch_history.STEPPED}")
    marker = re.search(r'<a class="change-point" href="/findings/(\d+)"><title>([^<]*)</title>.*?>([^<]*)</text>', html)
    assert marker is not None and int(marker.group(1)) == finding.id
    assert f"slower on main since {branch_history.commit(branch_history.STEP_AT)[:12]}" in marker.group(2)
    assert re.fullmatch(rf"1\.\d\dx since {branch_history.commit(branch_history.STEP_AT)[:10]}", marker.group(3))
    # A flat test's chart has none.
    assert 'class="change-point"' not in dashboard.page(f"/tests/entry?project=1&id={branch_history.FLAT[0]}")
    # Its finding page and the inbox tell it like any other finding.
    page = dashboard.page(f"/findings/{finding.id}")
    assert "last fast push" in page and "interleaved" in page
    assert "slower on main since" in dashboard.page("/")


def test_the_list_order_and_sums_match_grouping_every_entry(db_session):
    """The list reads entries newest first until it has a page's tests (through an index)
    instead of grouping the table: the same tests in the same order, with the same sums,
    as grouping every entry the filters keep; ties (a suite's tests all last ran in one
    job) by name, pages apart, across more than one batch of entries."""
    from services.jobs.lifecycle import get_or_create_project
    from web import catalogue

    projects = [get_or_create_project(db_session, name).id for name in ("alpha", "beta")]
    rng = random.Random(17)
    seen = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    for n in range(40):
        project = projects[n % 2]
        test = f"tests/test_{rng.randrange(1000):03d}.py::test_{n}"
        for config in ("cpuset=0", "cpuset=0-1", "cpus=0.5"):
            for branch in ("main", "feature"):
                last = rng.choice((90, 90, 90, rng.randrange(1, 90)))  # most last ran in the newest job
                db_session.add(
                    CatalogueEntry(
                        project_id=project,
                        test_id=test,
                        config_label=config,
                        branch=branch,
                        runs=rng.randrange(1, 9),
                        jobs=rng.randrange(1, 5),
                        first_job_id=1,
                        last_job_id=last,
                        last_p50_s=rng.random(),
                        last_p95_s=rng.random(),
                        last_seen_at=seen + dt.timedelta(hours=last),
                    )
                )
    db_session.flush()
    entries = db_session.query(CatalogueEntry).all()

    def expected(keep) -> list[tuple]:
        groups: dict[tuple[int, str], list[CatalogueEntry]] = {}
        for e in entries:
            if keep(e):
                groups.setdefault((e.project_id, e.test_id), []).append(e)
        rows = [
            (-max(e.last_job_id for e in es), t, p, sum(e.runs for e in es), max(e.last_seen_at for e in es))
            for (p, t), es in groups.items()
        ]
        return [(p, t, -last, runs, at) for last, t, p, runs, at in sorted(rows)]

    def listed(**filters) -> list[tuple]:
        out, page = [], 0
        while True:
            rows, more = catalogue.catalogue(db_session, projects, per_page=7, page=page, **filters)
            out += [(r.project_id, r.test_id, r.last_job_id, r.runs, r.last_seen_at) for r in rows]
            if not more:
                return out
            page += 1

    def same(got, want):
        # SQLite gives naive datetimes back: compare the instants.
        assert [g[:4] for g in got] == [w[:4] for w in want]
        assert [g[4].replace(tzinfo=None) for g in got] == [w[4].replace(tzinfo=None) for w in want]

    same(listed(), expected(lambda e: True))
    same(listed(branch="feature"), expected(lambda e: e.branch == "feature"))
    same(listed(config="cpus=0.5"), expected(lambda e: e.config_label == "cpus=0.5"))
    same(listed(project_id=projects[1]), expected(lambda e: e.project_id == projects[1]))
    same(listed(search="TEST_0"), expected(lambda e: "test_0" in e.test_id))


def test_a_search_is_a_quoted_literal_matched_as_typed(db_session):
    """The search goes into the statement as a literal (the planner needs it for the
    trigram index): quotes, backslashes, % and _ in it are characters, never SQL or
    wildcards, on both databases."""
    from services.jobs.lifecycle import get_or_create_project
    from web import catalogue

    project = get_or_create_project(db_session, "alpha").id
    odd = ["tests/test_it's.py::test_a", "tests/test_x.py::test_50%_b\\c", "tests/test_x.py::test_50xxb"]
    for n, test in enumerate(odd):
        db_session.add(
            CatalogueEntry(
                project_id=project,
                test_id=test,
                config_label="cpuset=0",
                branch="main",
                runs=1,
                jobs=1,
                first_job_id=1,
                last_job_id=n + 1,
            )
        )
    db_session.flush()

    def found(search: str) -> list[str]:
        return [row.test_id for row in catalogue.catalogue(db_session, [project], search=search)[0]]

    assert found("it's") == [odd[0]]
    assert found("50%_b\\") == [odd[1]]
    assert found("50%") == [odd[1]]
    assert found("' OR '1'='1") == []
    assert found("%") == [odd[1]]


def test_a_rows_link_made_from_one_path_a_page_is_url_fors(dashboard):
    """Lists build a row's link from parts made once a page (path_around, query_value):
    the same link as url_for's, whatever the test id holds."""
    from flask import url_for

    from web.views import path_around, query_value

    odd = "tests/a b.py::test_x[1-&é'\"%/?#]"
    with dashboard.client.application.test_request_context():
        before, after = path_around("web.test", "job_id", id=odd)
        assert f"{before}42{after}" == url_for("web.test", job_id=42, id=odd)
        entry = url_for("web.test_entry")
        assert f"{entry}?project=3&id={query_value(odd)}" == url_for("web.test_entry", project=3, id=odd)


def test_a_muted_finding_is_not_listed_under_open_findings(dashboard):
    _jobs(dashboard, ["main"])
    with dashboard.session_factory() as session:
        futex = session.scalar(select(Finding.id).where(Finding.test_id == TEST_SLOW, Finding.kind == "futex_storm"))
    muted = dashboard.post(f"/findings/{futex}/triage", {"status": "muted"}, form_page=f"/findings/{futex}")
    assert muted.status_code == 302
    html = dashboard.page(f"/tests/entry?project=1&id={TEST_SLOW}")
    opened = html[html.index('id="open-findings"') : html.index("</ul>", html.index('id="open-findings"'))]
    closed = html[html.index('id="closed-findings"') : html.index("</ul>", html.index('id="closed-findings"'))]
    assert f"/findings/{futex}" not in opened and "futex holds" not in opened
    assert f"/findings/{futex}" in closed and "muted" in closed
    assert "/findings/" in opened  # the others are still open
    # Every one muted: the open list says so rather than pretending none ever named it.
    with dashboard.session_factory() as session:
        for finding in session.query(Finding).all():
            finding.status = TriageStatus.muted
        session.commit()
    html = dashboard.page(f"/tests/entry?project=1&id={TEST_SLOW}")
    assert "No open finding: every one that names this test is muted or fixed." in html
