"""The finding page as one story: symptom, cause, slow evidence beside fast, the runs,
other jobs with the same problem, the busy-machine warning, the interactive flame graph."""

from __future__ import annotations

import datetime as dt
import re

from sqlalchemy import delete, select

from services.models import Finding, Job, RunKind, TestResult
from tests.web.sample_data import TEST_SLOW, store_handoff_job


def _story(dashboard, count: int = 1) -> tuple[list[int], dict[str, int]]:
    dashboard.add_user("ann", ["demo"])
    with dashboard.session_factory() as session:
        start = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
        ids = [
            store_handoff_job(session, dashboard.settings, created_at=start + dt.timedelta(days=i)).id
            for i in range(count)
        ]
        session.commit()
        findings = {f.kind: f.id for f in session.scalars(select(Finding).where(Finding.job_id == ids[-1]))}
    assert dashboard.sign_in("ann").status_code == 302
    return ids, findings


def _section(html: str, start: str, end: str) -> str:
    return html[html.index(start) : html.index(end, html.index(start))]


def test_symptom_and_cause_come_first_with_units(dashboard):
    _, findings = _story(dashboard)
    html = dashboard.page(f"/findings/{findings['futex_storm']}")
    story = _section(html, 'id="story"', "</section>")
    # The test's medians: 20.0 ms pinned, 1.90 s on two cores = 95x.
    assert "<strong>95.0× slower</strong> with <code>cpuset=0-1</code> (1.90 s median)" in story
    assert "<code>cpuset=0</code> (20.0 ms median)" in story
    # The evidence-backed cause is the diagnosis's, linked when it is another finding.
    assert "<code>gil_contention</code>" in story and "backed by evidence" in story
    assert f'href="/findings/{findings["gil_contention"]}"' in story
    assert "process pool" in story  # what to do
    # The runs as a plot: ten dots, a log axis for the 95x spread.
    assert html.count('class="dot"') == 10 and "log scale" in html


def test_slow_evidence_sits_beside_the_fast_and_uncited_kinds_stay_folded(dashboard):
    _, findings = _story(dashboard)
    html = dashboard.page(f"/findings/{findings['futex_storm']}")
    pairs = re.findall(r'<details class="pair" data-kind="(\w+)" (open)?>', html)
    kinds = [kind for kind, _ in pairs]
    opened = {kind for kind, state in pairs if state}
    assert opened == {"strace", "pyspy"}  # what futex_storm cites
    assert kinds[:2] == ["strace", "pyspy"]  # cited first
    assert {"gdb", "pyspy_dump", "faulthandler"} <= set(kinds) - opened  # not cited: folded
    strace = _section(html, '<details class="pair" data-kind="strace"', '<details class="pair" data-kind="pyspy"')
    slow = _section(strace, 'class="side slow"', 'class="side fast"')
    fast = strace[strace.index('class="side fast"') :]
    assert "futex</code> holds 97.6 %" in slow.replace("Top syscall <code>", "")
    assert "<code>read</code> holds 61.0 %" in fast
    assert "4.100000 s" in slow and "410 µs" in slow  # units on the numbers
    assert "same test, not cited" in fast


def test_other_jobs_with_the_same_fingerprint_are_listed(dashboard):
    ids, findings = _story(dashboard, count=3)
    html = dashboard.page(f"/findings/{findings['cpu_sensitivity']}")
    other = _section(html, 'id="other-jobs"', "</table>")
    assert "Other jobs with this problem (2)" in other
    assert f'href="/jobs/{ids[0]}"' in other and f'href="/jobs/{ids[1]}"' in other
    assert f'href="/jobs/{ids[2]}"' not in other and "90.0×" in other


def test_a_busy_machine_is_flagged_on_the_job_and_finding_pages(dashboard):
    (job_id,), findings = _story(dashboard)
    quiet_job = dashboard.page(f"/jobs/{job_id}")
    quiet = dashboard.page(f"/findings/{findings['futex_storm']}")
    assert "machine was busy" not in quiet_job and "machine was busy" not in quiet
    with dashboard.session_factory() as session:
        runs = [run for config in session.get(Job, job_id).configs for run in config.runs if run.kind == RunKind.timing]
        for run in runs[:4]:
            run.foreign_cpus = 1.4
        session.commit()
    for page in (f"/jobs/{job_id}", f"/findings/{findings['futex_storm']}"):
        html = dashboard.page(page)
        warning = _section(html, 'class="flash warn busy"', "</p>")
        assert "The machine was busy during the runs" in warning
        assert "up to 1.4 CPUs busy" in warning and "4 of 10 timing runs" in warning
        assert html.index("flash warn busy") < html.index("<h2")  # at the top, not after the tables


def test_flame_graph_data_is_the_profile_as_a_tree_and_scripts_are_ours(dashboard):
    _, findings = _story(dashboard)
    html = dashboard.page(f"/findings/{findings['futex_storm']}")
    url = re.search(r'<div class="flame" data-profile="([^"]+)"', html).group(1)
    # The box names the scripts that draw it (lagtrace.js loads them), on the finding's page
    # and on the evidence entry's own page alike: d3 was loaded only by the finding's.
    evidence_id = int(url.split("/")[2])
    for page in (html, dashboard.page(f"/evidence/{evidence_id}")):
        box = re.search(
            r'<div class="flame" data-profile="[^"]+"\s+data-scripts="([^"]+)"\s+data-style="([^"]+)"', page
        )
        assert box, page[:3000]
        scripts = [*re.findall(r'<script src="([^"]+)"', page), *box.group(1).split()]
        assert scripts[-2:] == [
            "/static/vendor/d3-7.9.2/d3.min.js",
            "/static/vendor/d3-flame-graph-4.1.3/d3-flamegraph.min.js",
        ]
        assert all(src.startswith("/static/") for src in scripts)
        for src in [*scripts, box.group(2)]:
            assert dashboard.client.get(src).status_code == 200
    tree = dashboard.client.get(url).get_json()
    # all -> MainThread -> main -> receive -> call_soon_threadsafe, 3 samples, 2 in the leaf
    assert tree["name"] == "all" and tree["value"] == 3
    thread = tree["children"][0]
    assert thread["name"] == "MainThread"
    leaf = thread["children"][0]["children"][0]["children"][0]
    assert leaf["name"].startswith("call_soon_threadsafe") and leaf["value"] == 2
    policy = dashboard.client.get(url).headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "unsafe" not in policy
    # Another entry kind, or an unknown one, has no profile.
    with dashboard.session_factory() as session:
        gdb = session.scalar(select(Finding).where(Finding.id == findings["gil_contention"])).evidence_ids[0]
    assert dashboard.client.get(f"/evidence/{gdb}/flame.json").status_code == 404
    assert dashboard.client.get("/evidence/99999/flame.json").status_code == 404


def test_a_finding_of_a_test_without_timings_still_reads(dashboard):
    (_job_id,), findings = _story(dashboard)
    with dashboard.session_factory() as session:
        session.execute(delete(TestResult).where(TestResult.test_id == TEST_SLOW))
        session.commit()
    html = dashboard.page(f"/findings/{findings['futex_storm']}")
    assert "No timing runs to plot" in html
    assert "futex holds 97.6 % of syscall time (detail)" in _section(html, 'id="story"', "</section>")
