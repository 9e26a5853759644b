"""The job page of a suite of real size: a 5,000-test job shows its flagged tests, the
widest and slowest few, and counts the rest with a link to every test, page by page,
from the report stored when the job finished (not rebuilt on each view)."""

from __future__ import annotations

import re

from services.diagnose.findings import fingerprint
from services.jobs import summaries
from services.jobs.lifecycle import get_or_create_project
from services.models import Finding, Job, JobConfig, JobStatus, Run, RunKind, TestResult, utcnow
from services.summary_models import JobReport

SUITE = 5000
FOCUSED = 12
FLAGGED = ("tests/suite/test_0003.py::test_case", "tests/suite/test_0007.py::test_case")


def _name(i: int) -> str:
    return f"tests/suite/test_{i:04d}.py::test_case"


def _run(kind: RunKind, repetition: int, wall: float) -> Run:
    return Run(
        kind=kind,
        repetition=repetition,
        wall_s=wall,
        user_s=wall * 0.8,
        sys_s=0.1,
        max_rss_kb=90000,
        voluntary_ctx_switches=500,
        involuntary_ctx_switches=20,
        exit_code=0,
    )


def _store_suite_job(session) -> Job:
    """As the engine stores a surveyed suite: one whole-suite run per configuration, then
    the tests the survey could not clear rerun together five times; two of them flagged."""
    job = Job(
        project=get_or_create_project(session, "demo"),
        status=JobStatus.done,
        source="web",
        command=["python3", "-m", "pytest", "tests/suite"],
        executor="docker",
        repeat=5,
        started_at=utcnow(),
        finished_at=utcnow(),
    )
    job.configs = [
        JobConfig(position=0, label="cpuset=0", cpuset="0"),
        JobConfig(position=1, label="cpuset=0-1", cpuset="0-1"),
    ]
    session.add(job)
    session.flush()
    for position, config in enumerate(job.configs):
        survey = _run(RunKind.survey, 1, 120.0)
        survey.config = config
        session.add(survey)
        session.flush()
        session.bulk_insert_mappings(
            TestResult,  # type: ignore[arg-type]
            [
                {"run_id": survey.id, "test_id": _name(i), "duration_s": 0.002 + (i % 97) / 10000, "outcome": "passed"}
                for i in range(SUITE)
            ],
        )
        for repetition in range(5):
            run = _run(RunKind.focus, repetition + 1, 2.0)
            run.config = config
            run.test_results = [
                TestResult(
                    test_id=_name(i),
                    duration_s=(0.3 if _name(i) in FLAGGED and position == 0 else 0.01) + repetition / 1000,
                    outcome="passed",
                )
                for i in range(FOCUSED)
            ]
            session.add(run)
    for test in FLAGGED:
        session.add(
            Finding(
                job=job,
                kind="cpu_sensitivity",
                severity="high",
                title=f"{test} 30x slower with cpuset=0",
                detail="slower pinned to one CPU",
                config_label="cpuset=0",
                test_id=test,
                metrics={"ratio": 30.0},
                evidence_ids=[],
                fingerprint=fingerprint("demo", "cpu_sensitivity", test),
            )
        )
    session.flush()
    return job


def test_a_5000_test_job_page_shows_the_flagged_tests_and_counts_the_cleared(dashboard):
    dashboard.add_user("ann", ["demo"])
    with dashboard.session_factory() as session:
        job = _store_suite_job(session)
        summaries.after_finish(session, job, dashboard.settings.thresholds)  # what the finish step does
        session.commit()
        job_id = job.id
    assert dashboard.sign_in("ann").status_code == 302

    html = dashboard.page(f"/jobs/{job_id}")
    matrix = html.split('<table class="matrix">', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r'<th scope="row">', matrix)
    # The whole command, the two flagged tests and the widest and slowest few: not 5,000 rows.
    assert 3 <= len(rows) <= 1 + len(FLAGGED) + summaries.WIDEST_SHOWN + summaries.SLOWEST_SHOWN
    for test in FLAGGED:
        assert f"<code>{test}</code>" in matrix
    hidden = re.search(r'<p id="tests-hidden">(\d+) more tests not shown \((\d+) tests cleared by the survey\)', html)
    assert hidden, html[-3000:]
    assert int(hidden[1]) == SUITE - (len(rows) - 1)
    assert int(hidden[2]) == SUITE - FOCUSED
    assert f'href="/jobs/{job_id}/tests"' in html
    # What the job cost: two 120 s surveys and ten 2 s focused runs, against the suite's
    # own time (its survey with the most CPUs).
    assert "its runs 260.0 s, 2.2x the suite's own time (120.00 s: the median of its untraced runs" in html, html[:3000]

    # Every test, a hundred a page, the flagged ones (widest spread) first.
    first = dashboard.page(f"/jobs/{job_id}/tests")
    assert len(re.findall(r'<th scope="row">', first)) == 100
    assert all(test in first for test in FLAGGED)
    last = dashboard.page(f"/jobs/{job_id}/tests?page=49")
    assert len(re.findall(r'<th scope="row">', last)) == 100 and "next" not in last

    # A finding triaged after the job finished shows its state now, over the stored report.
    with dashboard.session_factory() as session:
        assert session.get(JobReport, job_id) is not None
        finding = session.query(Finding).filter_by(job_id=job_id, test_id=FLAGGED[0]).one()
        finding.status = "muted"
        session.commit()
    assert "muted" in dashboard.page(f"/jobs/{job_id}")
