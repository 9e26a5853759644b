"""The pages over a stored job: inbox, job list, matrix, plots, evidence viewers, triage,
artifacts, reruns. Pages are read as HTML without JavaScript."""

from __future__ import annotations

import datetime as dt
import io
import re
import time

from sqlalchemy import select

from services.diagnose import inbox
from services.diagnose.diagnoses import UNEXPLAINED
from services.diagnose.findings import fingerprint
from services.jobs.lifecycle import get_or_create_project
from services.jobs.submit import _rerun_command
from services.measure.drill import NO_TARGETS
from services.models import Evidence, Finding, Job, JobShard, JobStatus, JobTask, TaskState, TestResult, TriageEvent
from tests.web.conftest import PASSWORD
from tests.web.sample_data import TEST_SLOW, TEST_STEADY, store_handoff_job


def _signed_in_with_jobs(dashboard, count: int = 1) -> list[int]:
    dashboard.add_user("ann", ["demo"])
    ids = []
    with dashboard.session_factory() as session:
        start = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
        for i in range(count):
            ids.append(store_handoff_job(session, dashboard.settings, created_at=start + dt.timedelta(days=i)).id)
        session.commit()
    assert dashboard.sign_in("ann").status_code == 302
    return ids


def test_inbox_groups_by_fingerprint_sorted_by_impact(dashboard):
    ids = _signed_in_with_jobs(dashboard, count=3)
    html = dashboard.page("/")
    rows = re.findall(r"<tr>\s*<td><span class=\"sev.*?</tr>", html, re.S)
    assert len(rows) == 3  # three problems, each seen in three jobs, not nine rows
    # cpu_sensitivity (90x x 3 jobs) outranks the 1x kinds; each row says 3 jobs, first and last seen.
    assert "90.0x slower" in rows[0] and ">270.0<" in rows[0]
    assert all(">3<" in row for row in rows)
    assert "2026-11-01" in rows[0] and "2026-11-03" in rows[0]
    assert f'href="/jobs/{ids[-1]}"' in rows[0]  # last seen links the newest job


def test_inbox_says_which_causes_their_knob_confirmed(dashboard):
    dashboard.add_user("ann", ["demo"])
    with dashboard.session_factory() as session:
        confirmed, refuted = (store_handoff_job(session, dashboard.settings, project=p) for p in ("demo", "other"))
        for job, verdict in ((confirmed, "confirmed"), (refuted, "not confirmed")):
            config = job.configs[-1]
            content = {"status": "ok", "cause": "gil_contention", "test": TEST_SLOW, "knob": "k", "says": "s"}
            content |= {"config": config.label, "verdict": verdict, "with_s": [0.2] * 5, "without_s": [1.2] * 5}
            session.add(Evidence(job=job, config=config, test_id=TEST_SLOW, kind="confirm", content=content))
        session.commit()
    dashboard.add_user("bob", ["demo", "other"])
    assert dashboard.sign_in("bob").status_code == 302
    html = dashboard.page("/")
    rows = re.findall(r"<tr>\s*<td><span class=\"sev.*?</tr>", html, re.S)
    demo = [row for row in rows if "<td>demo</td>" in row]
    other = [row for row in rows if "<td>other</td>" in row]
    # Every row of the test in the job shows it: the symptom and each cause found there.
    assert demo and all("gil_contention confirmed by its knob" in row for row in demo), demo
    assert other and all("gil_contention: its knob did not help" in row for row in other), other
    assert "confirmed by its knob" not in "".join(other)


def test_inbox_filters_by_kind_severity_status_and_project(dashboard):
    _signed_in_with_jobs(dashboard)
    assert "futex holds" not in dashboard.page("/?kind=gil_contention")
    assert "threads wait for the GIL" in dashboard.page("/?kind=gil_contention")
    medium = dashboard.page("/?severity=medium")
    assert "futex holds" in medium and "90.0x" not in medium
    assert "No findings match" in dashboard.page("/?status=muted")
    assert "No findings match" in dashboard.page("/?project=999")
    assert dashboard.client.get("/?status=bogus").status_code == 422


def test_inbox_lists_a_high_finding_without_a_ratio_above_a_low_2x_one(dashboard):
    # futex_storm states no ratio (it counts as 1x): by ratio x recurrence alone the LOW
    # 2.0x finding seen in two jobs (impact 4) came first, and the page said "by impact".
    dashboard.add_user("ann", ["demo"])
    with dashboard.session_factory() as session:
        project = get_or_create_project(session, "demo")
        jobs = [
            Job(project=project, status=JobStatus.done, source="web", command=["pytest"], executor="docker", repeat=5)
            for _ in range(2)
        ]
        session.add_all(jobs)
        session.flush()

        def finding(job: Job, kind: str, severity: str, title: str, ratio: float | None) -> None:
            session.add(
                Finding(
                    job=job,
                    kind=kind,
                    severity=severity,
                    title=title,
                    detail="-",
                    test_id="t::x",
                    metrics={"ratio": ratio} if ratio else {},
                    evidence_ids=[],
                    fingerprint=fingerprint("demo", kind, "t::x"),
                )
            )

        for job in jobs:
            finding(job, "slower_since", "low", "t::x is 2.0x slower since", 2.0)
        finding(jobs[-1], "futex_storm", "high", "futex holds 90 % of syscall time", None)
        session.flush()
        inbox.refresh_groups(session, {f.fingerprint for job in jobs for f in job.findings})
        session.commit()
    assert dashboard.sign_in("ann").status_code == 302
    html = dashboard.page("/")
    rows = re.findall(r"<tr>\s*<td><span class=\"sev.*?</tr>", html, re.S)
    assert "sev-high" in rows[0] and "sev-low" in rows[1]
    assert "futex holds" in rows[0] and ">1.0<" in rows[0]  # its impact, shown as it is
    assert "2.0x slower" in rows[1] and ">4.0<" in rows[1]
    assert "the most severe first" in html and "by impact:" not in html


def test_job_page_puts_findings_first_then_the_coloured_matrix(dashboard):
    (job_id,) = _signed_in_with_jobs(dashboard)
    html = dashboard.page(f"/jobs/{job_id}")
    assert html.index("Findings (3)") < html.index("test × CPU configuration")
    # The three findings of the slow test told as one story, before the findings (docs/guides/dashboard.md).
    story = html[html.index('id="diagnoses"') : html.index("Findings (3)")]
    assert "Diagnoses (1)" in story and TEST_SLOW in story
    assert "is 90.0x slower with cpuset=0-1" in story  # the symptom
    assert "<code>gil_contention</code>: threads wait for the GIL" in story  # the evidence-backed cause
    assert story.count("/evidence/") >= 3 and "process pool" in story  # its evidence, what to do
    matrix = html[html.index('class="matrix"') :]
    row = matrix[matrix.index(TEST_SLOW) :].split("</tr>")[0]
    # cpuset=0 is the fastest (1.0x, green); cpuset=0-1 is ~94x (the hottest band).
    assert re.search(r'class="num heat-0">20\.0 ms <span class="n">n=5</span><br><span class="ratio">1\.0×', row)
    assert re.search(r'class="num heat-4">1\.90 s <span class="n">n=5</span><br><span class="ratio">95\.0×', row)
    # The slowest-spreading test is listed before the steady one; the whole command comes first.
    assert matrix.index("(whole command)") < matrix.index(TEST_SLOW) < matrix.index(TEST_STEADY)
    assert "Rerun with other CPU configurations" in html and 'name="csrf_token"' in html


def test_the_pages_say_where_to_ask_for_evidence_and_the_cli_keeps_its_flag(dashboard):
    # The drill's note and a diagnosis's advice are stored worded for the CLI (--evidence);
    # on the dashboard no flag can be passed: they name the New job page's Evidence options.
    (job_id,) = _signed_in_with_jobs(dashboard)
    with dashboard.session_factory() as session:
        job = session.get(Job, job_id)
        job.notes = [*job.notes, NO_TARGETS]
        lone = Job(
            project=job.project, status=JobStatus.done, source="web", command=["pytest"], executor="docker", repeat=5
        )
        session.add(lone)
        session.flush()
        unexplained = Finding(
            job=lone,
            kind="cpu_sensitivity",
            severity="high",
            title=f"{TEST_SLOW} is 3.0x slower with cpuset=0-1 than with cpuset=0",
            detail="-",
            config_label="cpuset=0-1",
            test_id=TEST_SLOW,
            metrics={"ratio": 3.0},
            evidence_ids=[],
            fingerprint=fingerprint("demo", "cpu_sensitivity", "lone"),
        )
        session.add(unexplained)
        session.commit()
        finding_id = unexplained.id
    job_page = dashboard.page(f"/jobs/{job_id}")
    finding_page = dashboard.page(f"/findings/{finding_id}")
    assert "choose probes under Evidence on the New job page to drill anyway" in job_page
    assert "from the New job page with strace, pyspy and core ticked under Evidence" in finding_page
    assert "--evidence" not in job_page and "--evidence" not in finding_page
    # The CLI prints the same note and advice as stored, with its flag.
    assert "pass --evidence to drill anyway" in NO_TARGETS
    assert "rerun with --evidence strace,pyspy,core" in UNEXPLAINED["cpu_sensitivity"]


def test_a_running_job_page_follows_progress_without_javascript(dashboard):
    (job_id,) = _signed_in_with_jobs(dashboard)
    with dashboard.session_factory() as session:
        session.get(Job, job_id).status = JobStatus.running
        session.commit()
    html = dashboard.page(f"/jobs/{job_id}")
    assert '<noscript><meta http-equiv="refresh" content="2"></noscript>' in html
    assert "<progress" in html and "Progress:" in html
    progress = dashboard.client.get(f"/jobs/{job_id}/progress").get_json()
    assert progress["status"] == "running" and progress["runs_done"] == 10 and progress["phase"] == "screening"


def test_test_page_plots_the_distribution_and_history(dashboard):
    first, second = _signed_in_with_jobs(dashboard, count=2)
    html = dashboard.page(f"/jobs/{second}/test?id={TEST_SLOW}")
    svg = html[html.index("<svg") : html.index("</svg>")]
    assert svg.count('class="dot"') == 10  # five runs in each of two configurations
    assert "log scale" in svg and "cpuset=0-1" in svg and 'class="median"' in svg
    assert f'href="/jobs/{first}/test?id=' in html and "(this job)" in html  # history across jobs
    assert html.count('class="series') >= 2  # the trend lines
    whole = dashboard.page(f"/jobs/{second}/test")
    assert "The whole command" in whole and "5.40 s" in whole
    assert dashboard.client.get(f"/jobs/{second}/test?id=nope").status_code == 404


def test_finding_page_shows_stacks_with_the_gil_highlighted(dashboard):
    (job_id,) = _signed_in_with_jobs(dashboard)
    with dashboard.session_factory() as session:
        gil = session.scalar(select(Finding).where(Finding.job_id == job_id, Finding.kind == "gil_contention"))
    html = dashboard.page(f"/findings/{gil.id}")
    assert re.search(r'class="thread gil-waiter\s*"', html) and "Waiting for the GIL</span>" in html
    assert re.search(r'class="thread\s+gil-holder"', html) and "holds the GIL" in html
    assert "call_soon_threadsafe" in html and "active+gil" in html
    assert "current thread (ran the dump" in html  # faulthandler


def test_strace_table_sorts_on_the_server_and_highlights_waits(dashboard):
    (job_id,) = _signed_in_with_jobs(dashboard)
    with dashboard.session_factory() as session:
        futex = session.scalar(select(Finding).where(Finding.job_id == job_id, Finding.kind == "futex_storm"))
    html = dashboard.page(f"/findings/{futex.id}")
    table = html[html.index('class="strace') :]
    assert table.index("<code>futex</code>") < table.index("<code>read</code>")  # by % time
    assert re.search(r'<tr class="wait">\s*<td><code>futex</code>', table)
    assert re.search(r'<tr class="wait">\s*<td><code>epoll_wait</code>', table)
    assert re.search(r'<tr class="">\s*<td><code>read</code>', table)
    by_calls = dashboard.page(f"/findings/{futex.id}?sort=calls")
    table = by_calls[by_calls.index('class="strace') :]
    assert table.index("<code>read</code>") < table.index("<code>futex</code>")


def test_flame_graph_is_served_decompressed_same_origin_with_a_strict_policy(dashboard):
    (job_id,) = _signed_in_with_jobs(dashboard)
    with dashboard.session_factory() as session:
        futex = session.scalar(select(Finding).where(Finding.job_id == job_id, Finding.kind == "futex_storm"))
    html = dashboard.page(f"/findings/{futex.id}")
    src = re.search(r'<object class="flamegraph" type="image/svg\+xml" data="([^"]+)"', html).group(1)
    response = dashboard.client.get(src)
    assert response.status_code == 200 and response.mimetype == "image/svg+xml"
    body = response.get_data(as_text=True)
    assert "<svg" in body and "call_soon_threadsafe" in body
    policy = response.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "sandbox" in policy and "script-src" not in policy
    download = dashboard.client.get(src + "?download=1")
    assert download.headers["Content-Disposition"].startswith("attachment")
    assert "script-src 'self'" in dashboard.client.get("/").headers["Content-Security-Policy"]


def test_triage_records_who_changed_what(dashboard):
    (job_id,) = _signed_in_with_jobs(dashboard)
    with dashboard.session_factory() as session:
        finding_id = session.scalar(select(Finding.id).where(Finding.job_id == job_id, Finding.kind == "futex_storm"))
    response = dashboard.post(
        f"/findings/{finding_id}/triage", {"status": "muted", "assignee": "bob", "note": "known: upstream busy loop"}
    )
    assert response.status_code == 302
    html = dashboard.page(f"/findings/{finding_id}")
    assert "is now muted" in html
    assert re.search(
        r"<strong>ann</strong> set <span class=\"status status-muted\">muted</span>, assignee bob: "
        r"“known: upstream busy loop”",
        html,
    )
    with dashboard.session_factory() as session:
        events = session.scalars(select(TriageEvent).where(TriageEvent.finding_id == finding_id)).all()
        assert [(e.actor, e.status.value, e.assignee) for e in events] == [("ann", "muted", "bob")]
    assert "No findings match" not in dashboard.page("/?status=muted")
    with dashboard.session_factory() as session:
        sensitive = session.scalar(select(Finding.id).where(Finding.kind == "cpu_sensitivity"))
    assert "<th>ratio</th><td><code>90.0×</code>" in dashboard.page(f"/findings/{sensitive}")  # with its unit


def test_rerun_form_makes_a_linked_job_with_other_configurations(dashboard):
    (job_id,) = _signed_in_with_jobs(dashboard)
    response = dashboard.post(
        f"/jobs/{job_id}/rerun",
        {"config": ["cpus=0.5"], "other_configs": "cpus=1,cpuset=0\n", "repeat": "3"},
        form_page=f"/jobs/{job_id}",
    )
    assert response.status_code == 302
    child_id = int(response.headers["Location"].rsplit("/", 1)[1])
    with dashboard.session_factory() as session:
        child = session.get(Job, child_id)
        assert child.parent_id == job_id and child.repeat == 3
        assert [c.label for c in child.configs] == ["cpus=0.5", "cpus=1,cpuset=0"]
        assert child.command == ["python3", "-m", "pytest", "tests/test_ws.py"]
    html = dashboard.page(f"/jobs/{child_id}")
    assert f"Rerun of job {job_id} queued as job {child_id}" in html and "Progress:" in html


def test_rerun_of_one_test_narrows_the_command_and_bad_input_goes_back_to_the_form(dashboard):
    (job_id,) = _signed_in_with_jobs(dashboard)
    response = dashboard.post(
        f"/jobs/{job_id}/rerun",
        {"config": ["cpuset=0"], "repeat": "2", "test_id": TEST_SLOW},
        form_page=f"/jobs/{job_id}",
    )
    with dashboard.session_factory() as session:
        child = session.get(Job, int(response.headers["Location"].rsplit("/", 1)[1]))
        assert child.command == ["python3", "-m", "pytest", TEST_SLOW]
        parent = session.get(Job, job_id)
        assert _rerun_command(session, parent, None) == parent.command
    page = f"/jobs/{job_id}"
    response = dashboard.client.post(
        f"/jobs/{job_id}/rerun",
        data={
            "config": ["cpuset=0", "cpus=0.5"],
            "other_configs": "cpus=banana\ncpuset=0-1",
            "repeat": "31",
            "csrf_token": dashboard.csrf(page),
        },
        headers={"Referer": "http://localhost" + page},
    )
    # The job's page again, its rerun form as typed and every problem listed.
    assert response.status_code == 422
    form = _section(response.get_data(as_text=True), 'id="rerun"', "</form>")
    assert "change these 2:" in form
    assert "configs: cpus=banana: cpus=&#39;banana&#39; is not a number" in form
    assert "repeat: at most 30 (LAGTRACE_MAX_REPEAT)" in form
    assert "Value error" not in form
    assert re.search(r'value="cpus=0.5" checked', form) and re.search(r'value="cpuset=0" checked', form)
    assert not re.search(r'value="cpuset=0-1" checked', form)  # the job's own, not ticked this time
    assert "cpus=banana\ncpuset=0-1</textarea>" in form and 'value="31"' in form
    assert 'max="30"' in form


def test_jobs_list_pages_and_filters(dashboard):
    ids = _signed_in_with_jobs(dashboard, count=3)
    html = dashboard.page("/jobs")
    assert html.index(f"#{ids[2]}") < html.index(f"#{ids[0]}")  # newest first
    assert re.search(rf"#{ids[0]}</a>.*?<td class=\"num\">11</td>\s*<td class=\"num\">3</td>", html, re.S)
    assert f"#{ids[0]}" not in dashboard.page(f"/jobs?before={ids[0]}") and "No jobs yet" in dashboard.page(
        f"/jobs?before={ids[0]}"
    )
    assert "No jobs yet" in dashboard.page("/jobs?status=failed")


def test_submit_form_runs_a_job_end_to_end(running_dashboard, tmp_path):
    from tests.service_support import make_repository

    url, _ = make_repository(tmp_path / "repo", None)
    running_dashboard.add_user("ann", ["demo"])
    running_dashboard.sign_in("ann")
    form = running_dashboard.page("/jobs/new")
    project_id = re.search(r'<option value="(\d+)">demo</option>', form).group(1)
    response = running_dashboard.post(
        "/jobs/new",
        {
            "project": project_id,
            "repository": url,
            "command": "python3 steady.py",
            "config": ["cpuset=0", "cpuset=0-1"],
            "repeat": "2",
            "evidence": "none",
            "executor": "docker",
        },
        form_page="/jobs/new",
    )
    assert response.status_code == 302, response.get_data(as_text=True)
    job_path = response.headers["Location"]
    deadline = time.monotonic() + 120
    while "Progress:" in (html := running_dashboard.page(job_path)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert 'class="matrix"' in html, html
    assert "(whole command)" in html and "cpuset=0-1" in html
    assert PASSWORD not in html


def test_a_failed_job_page_does_not_claim_latency_was_healthy(dashboard):
    (job_id,) = _signed_in_with_jobs(dashboard)
    with dashboard.session_factory() as session:
        job = session.get(Job, job_id)
        for finding in session.scalars(select(Finding).where(Finding.job_id == job_id)):
            session.delete(finding)
        job.status, job.error, job.repeat = JobStatus.failed, "the checkout could not be read", 1
        session.commit()
    html = dashboard.page(f"/jobs/{job_id}")
    assert "the checkout could not be read" in html
    assert "latency did not depend" not in html and "nothing stalled" not in html
    assert "did not finish" in html
    assert "up to 1 run per configuration" in html and "up to 1 runs" not in html


def test_an_output_tail_keeps_its_lines_on_the_job_and_finding_pages(dashboard):
    (job_id,) = _signed_in_with_jobs(dashboard)
    tail = 'Traceback (most recent call last):\n  File "t.py", line 1\nImportError: no thing'
    with dashboard.session_factory() as session:
        job = session.get(Job, job_id)
        finding = session.scalars(select(Finding).where(Finding.job_id == job_id)).first()
        finding.detail = f"No run succeeded in every configuration. Last output:\n{tail}"
        job.error = f"installing the dependencies failed (exit 1):\n{tail}"
        session.commit()
        finding_id = finding.id
    escaped = tail.replace('"', "&#34;")
    for path in (f"/jobs/{job_id}", f"/findings/{finding_id}"):
        html = dashboard.page(path)
        assert f'Last output:<pre class="output-tail">{escaped}</pre>' in html, path
    html = dashboard.page(f"/jobs/{job_id}")
    assert f'installing the dependencies failed (exit 1):<pre class="output-tail">{escaped}</pre>' in html


def test_a_test_that_failed_to_collect_shows_a_dash_not_an_error(dashboard):
    (job_id,) = _signed_in_with_jobs(dashboard)
    broken = "tests/test_broken.py"
    with dashboard.session_factory() as session:
        for config in session.get(Job, job_id).configs:
            for run in config.runs:
                run.test_results.append(TestResult(test_id=broken, duration_s=0.0, outcome="passed"))
        session.commit()
    html = dashboard.page(f"/jobs/{job_id}")
    row = html[html.index(broken) :].split("</tr>")[0]
    assert "–" in row and "×" not in row


def test_a_sharded_jobs_page_shows_each_shard_with_its_worker(dashboard):
    (job_id,) = _signed_in_with_jobs(dashboard)
    with dashboard.session_factory() as session:
        job = session.get(Job, job_id)
        job.status = JobStatus.running
        for index, (worker, state) in enumerate([("node-a/11", TaskState.running), ("node-b/22", TaskState.done)], 1):
            session.add(JobShard(job_id=job_id, index=index, tests=[f"test_{index}.py"], test_count=40 + index))
            session.add(JobTask(job_id=job_id, step="screen", name=f"screen:shard-{index}", state=state, worker=worker))
        session.commit()
    html = dashboard.page(f"/jobs/{job_id}")
    shards = html[html.index('<table id="shards">') :]
    shards = shards[: shards.index("</table>")]
    assert "1 of 2" in shards and "2 of 2" in shards and "node-a/11" in shards and "node-b/22" in shards
    progress = dashboard.client.get(f"/jobs/{job_id}/progress").get_json()
    assert [(s["index"], s["tests"], s["state"]) for s in progress["shards"]] == [(1, 41, "running"), (2, 42, "done")]
    # The first shard still screens, though the last one is done: the job is not diagnosing yet.
    assert progress["phase"] == "screening"


def test_the_job_list_shows_each_jobs_counts_and_pages_by_id(database_url, tmp_path):
    """Both databases: the list reads columns and counts in SQL (no Job objects)."""
    from tests.web.conftest import build_dashboard

    made = build_dashboard(database_url, tmp_path, run_jobs=False)
    try:
        ids = _signed_in_with_jobs(made, count=3)
        with made.session_factory() as session:
            rerun = session.get(Job, ids[2])
            rerun.parent_id = ids[1]
            session.add(Finding(job_id=ids[0], kind="x", severity="low", title="t", detail="d", fingerprint="f"))
            session.flush()
            expected = {
                job_id: (
                    len([r for c in session.get(Job, job_id).configs for r in c.runs]),
                    len(session.get(Job, job_id).findings),
                )
                for job_id in ids
            }
            session.commit()
        html = made.page("/jobs")
        rows = re.findall(r'<tr>\s*<td><a href="/jobs/(\d+)">.*?</tr>', html, re.S)
        assert [int(r) for r in rows] == ids[::-1]  # newest first
        for job_id in ids:
            row = re.search(rf'<tr>\s*<td><a href="/jobs/{job_id}">.*?</tr>', html, re.S).group(0)
            runs, findings = expected[job_id]
            assert f'<td class="num">{runs}</td>\n      <td class="num">{findings}</td>' in row
            assert "<code>cpuset=0</code> <code>cpuset=0-1</code>" in row  # in the job's order
            assert "<code>python3 -m pytest tests/test_ws.py</code>" in row and "status-done" in row
        assert f"rerun of #{ids[1]}" in html
        assert expected[ids[0]][1] == expected[ids[1]][1] + 1  # the added finding is counted
        older = made.page(f"/jobs?before={ids[2]}")
        assert f'href="/jobs/{ids[2]}"' not in older and f'href="/jobs/{ids[1]}"' in older
        assert "No jobs yet" in made.page("/jobs?project=999")
    finally:
        made.engine.dispose()


def test_pages_for_unknown_ids_are_404_pages_and_the_api_stays_json(dashboard):
    _signed_in_with_jobs(dashboard)
    for path, says in [
        ("/jobs/abc", "job &#39;abc&#39; does not exist: ids are numbers"),
        ("/findings/abc", "finding &#39;abc&#39; does not exist: ids are numbers"),
        ("/jobs/99999", "job 99999 does not exist"),
        ("/tests/entry", "a test&#39;s page needs ?project=ID&amp;id=TEST"),
        ("/tests/entry?project=99&id=x", "project 99 does not exist"),
        ("/no/such/page", "no page at /no/such/page"),
    ]:
        response = dashboard.client.get(path)
        html = response.get_data(as_text=True)
        assert response.status_code == 404, (path, html[:500])
        assert response.mimetype == "text/html", (path, html[:500])
        assert says in html, (path, html[:3000])
        assert "None" not in html and '"error"' not in html
        # The dashboard's page: its nav (signed in) and its strict policy.
        assert 'id="main-nav"' in html
        assert "script-src 'self'" in response.headers["Content-Security-Policy"]
    # The API's paths keep their JSON errors, naming the field.
    for path in ("/api/v1/jobs/abc", "/api/v1/nothing"):
        response = dashboard.client.get(path)
        assert response.status_code == 404 and response.mimetype == "application/json"
        assert response.get_json()["problems"]
    # Signed out: still a page, not JSON (and no nav).
    dashboard.client.post("/sign-out", data={"csrf_token": dashboard.csrf("/")})
    response = dashboard.client.get("/findings/abc")
    assert response.status_code == 404 and response.mimetype == "text/html"
    assert 'id="main-nav"' not in response.get_data(as_text=True)


def test_an_upload_over_the_limit_names_the_limit_and_its_setting(dashboard):
    _signed_in_with_jobs(dashboard)
    dashboard.settings.max_archive_bytes = 1024 * 1024
    dashboard.client.application.config["MAX_CONTENT_LENGTH"] = 2 * 1024 * 1024
    response = dashboard.client.post(
        "/jobs/new",
        data={
            "csrf_token": dashboard.csrf("/jobs/new"),
            "project": "1",
            "command": "python3 -c pass",
            "archive": (io.BytesIO(b"0" * (2 * 1024 * 1024 + 1)), "code.tgz"),
        },
        content_type="multipart/form-data",
    )
    html = response.get_data(as_text=True)
    assert response.status_code == 413 and response.mimetype == "text/html", html[:500]
    assert "the upload is over the 1 MiB limit (LAGTRACE_MAX_ARCHIVE_BYTES, 1,048,576 bytes" in html
    assert "capacity limit" not in html


def _section(html: str, start: str, end: str) -> str:
    begin = html.index(start)
    return html[begin : html.index(end, begin)]


def test_the_new_job_form_keeps_what_was_typed_and_lists_every_problem(dashboard):
    _signed_in_with_jobs(dashboard)
    typed = {
        "project": "1",
        "repository": "http://example.com/code.git",
        "ref": "main",
        "command": "python3 -m pytest tests -k 'slow'",
        "config": ["cpuset=0", "cpus=0.5"],
        "other_configs": "cpus=abc",
        "repeat": "500",
        "evidence": "chosen",
        "probe": ["strace"],
        "stall_after": "2.5",
        "executor": "docker",
    }
    response = dashboard.post("/jobs/new", typed, form_page="/jobs/new")
    html = response.get_data(as_text=True)
    assert response.status_code == 422, html[:2000]
    problems = re.findall(r"<li>(.*?)</li>", _section(html, 'id="problems"', "</div>"))
    assert problems == [
        "configs: cpus=abc: cpus=&#39;abc&#39; is not a number",
        "repeat: at most 30 (LAGTRACE_MAX_REPEAT)",
        "repository.url &#39;http://example.com/code.git&#39;: only https:// git URLs are accepted",
    ]
    form = _section(html, '<form class="card"', "</form>")
    assert 'value="http://example.com/code.git"' in form and 'name="ref" value="main"' in form
    assert 'value="python3 -m pytest tests -k &#39;slow&#39;"' in form
    assert 'value="cpuset=0" checked' in form and 'value="cpus=0.5" checked' in form
    assert 'value="cpuset=0-1" checked' not in form
    assert "cpus=abc</textarea>" in form and 'value="500"' in form and 'value="2.5"' in form
    assert 'value="chosen" checked' in form and 'value="strace" checked' in form
    assert "<option selected>docker</option>" in form and '<option value="1" selected>demo</option>' in form
    assert 'max="30"' in form
    with dashboard.session_factory() as session:
        assert session.query(Job).count() == 1  # the stored job only: nothing was submitted
    # No repository and no command: both named, with what to give.
    html = dashboard.post("/jobs/new", {"project": "1", "repeat": "5"}, form_page="/jobs/new").get_data(as_text=True)
    problems = re.findall(r"<li>(.*?)</li>", _section(html, 'id="problems"', "</div>"))
    assert problems == [
        "command: give the test command (python3 -m pytest ...)",
        "repository: give a git URL or upload an archive",
    ]
