"""A test's trend in the catalogue counts a gate's runs and marks a failed run as a failure:
the time it took to fail is never drawn as its latency (docs/guides/dashboard.md)."""

from __future__ import annotations

import re

from sqlalchemy import select

from services.jobs.summaries import percentile, refresh_catalogue
from services.models import Job, JobConfig, Run, RunKind, TestResult
from services.summary_models import CatalogueEntry
from tests.web.sample_data import TEST_SLOW
from tests.web.trend_data import FAILED_S, GATE_LABEL, store_gated_branch
from web import catalogue
from web.plots import _seconds


def _stored(dashboard) -> dict[str, list[int]]:
    dashboard.add_user("ann", ["demo"])
    with dashboard.session_factory() as session:
        jobs = store_gated_branch(session, dashboard.settings)
        session.commit()
        refresh_catalogue(session, [1])  # what each job's finish does
        session.commit()
    assert dashboard.sign_in("ann").status_code == 302
    return jobs


def _passed(session, job_id: int, label: str) -> list[float]:
    return list(
        session.scalars(
            select(TestResult.duration_s)
            .join(Run)
            .join(JobConfig)
            .where(
                JobConfig.job_id == job_id,
                JobConfig.label == label,
                Run.kind.in_((RunKind.timing, RunKind.gate)),
                TestResult.test_id == TEST_SLOW,
                TestResult.outcome == "passed",
            )
        )
    )


def test_the_trend_has_every_job_gates_too_and_only_passed_runs_as_latency(dashboard):
    jobs = _stored(dashboard)
    with dashboard.session_factory() as session:
        project = session.get(Job, jobs["matrix"][0]).project
        entry = catalogue.test_entry(session, project, TEST_SLOW)
        assert [p.job_id for p in entry.points] == sorted(jobs["matrix"] + jobs["gates"])
        assert entry.gate_jobs == len(jobs["gates"])
        assert entry.failed_jobs == len(jobs["failed"])
        for point in entry.points:
            passed = _passed(session, point.job_id, GATE_LABEL)
            failed = point.failures.get(GATE_LABEL, 0)
            assert point.n[GATE_LABEL] == len(passed)
            if passed:
                assert point.p50[GATE_LABEL] == percentile(passed, 0.5)
                assert point.p95[GATE_LABEL] == percentile(passed, 0.95)
            else:
                assert GATE_LABEL not in point.p50 and failed  # only failures: no latency at all
            assert (failed > 0) == (point.job_id in jobs["failed"])
        # No point's latency is a failure's time.
        assert all(value > FAILED_S for p in entry.points for value in [*p.p50.values(), *p.p95.values()])
        newest = session.scalars(
            select(CatalogueEntry).where(CatalogueEntry.test_id == TEST_SLOW, CatalogueEntry.config_label == GATE_LABEL)
        ).one()
        assert newest.jobs == len(jobs["matrix"]) + len(jobs["gates"])
        assert newest.last_p50_s == entry.points[-1].p50[GATE_LABEL]


def test_the_page_says_how_many_jobs_were_gates_and_marks_each_failure(dashboard):
    jobs = _stored(dashboard)
    html = dashboard.page(f"/tests/entry?project=1&id={TEST_SLOW}")
    total = len(jobs["matrix"]) + len(jobs["gates"])
    assert f"{total} finished jobs ran it" in html
    assert f"{len(jobs['matrix'])} matrix, {len(jobs['gates'])} gates" in html
    assert f"failed in {len(jobs['failed'])} of them" in html
    chart = html[html.index('<section class="trend-branch">') : html.index("</section>")]
    crosses = re.findall(r'<g class="failure s\d"><title>job (\d+), ([^:]+): the test failed in (\d+) of', chart)
    assert sorted(int(job) for job, _, _ in crosses) == sorted(jobs["failed"])
    assert {label for _, label, _ in crosses} == {GATE_LABEL}
    # Every dot is a passed run's latency; none is a failure's time.
    dots = re.findall(r'<circle class="series-dot[^>]*><title>job (\d+), ([^ ]+) p(?:50|95): ([^<]+)</title>', chart)
    assert dots and _seconds(FAILED_S) not in {value for _, _, value in dots}
    gate_only_failed = jobs["failed"][-1]
    assert str(gate_only_failed) not in {job for job, label, _ in dots if label == GATE_LABEL}
    # The jobs table names each job's kind and its failed runs.
    rows = re.findall(r"<tr>\s*<td><a [^>]*>#(\d+)</a></td><td>(\w+)</td>(.*?)</tr>", html, re.S)
    kinds = {int(job): kind for job, kind, _ in rows}
    assert {job for job, kind in kinds.items() if kind == "gate"} == set(jobs["gates"])
    failed_cells = {int(job) for job, _, rest in rows if "failed</span>" in rest}
    assert failed_cells == set(jobs["failed"])
