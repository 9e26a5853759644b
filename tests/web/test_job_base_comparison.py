"""A pull request's job page: where the job came from, and its tests compared with the base."""

from __future__ import annotations

from services.jobs import pull_requests
from services.models import JobSource, Run, RunKind, TestResult
from services.thresholds import Thresholds
from tests.web.sample_data import TEST_SLOW, TEST_STEADY, store_handoff_job

BASE, HEAD = "b" * 40, "a" * 40


def base_runs(config, walls: list[float], slow: list[float]) -> None:
    for i, (wall, duration) in enumerate(zip(walls, slow, strict=True)):
        config.runs.append(
            Run(
                kind=RunKind.base,
                repetition=i + 1,
                wall_s=wall,
                user_s=wall * 0.9,
                sys_s=0.05,
                max_rss_kb=30000,
                voluntary_ctx_switches=1200,
                involuntary_ctx_switches=40,
                exit_code=0,
                test_results=[
                    TestResult(test_id=TEST_SLOW, duration_s=duration, outcome="passed"),
                    TestResult(test_id=TEST_STEADY, duration_s=0.010 + i * 0.001, outcome="passed"),
                ],
            )
        )


def test_a_pull_requests_job_page_shows_its_trigger_and_the_comparison_with_its_base(dashboard):
    with dashboard.session_factory() as session:
        job = store_handoff_job(session, dashboard.settings, with_source=False)
        job.trigger = "pull_request"
        session.add(
            JobSource(
                job_id=job.id,
                kind="git",
                repository_url="https://github.com/octo/demo.git",
                commit_sha=HEAD,
                github_repository="octo/demo",
                github_head_sha=HEAD,
                branch="faster-ws",
                base_ref="main",
                base_commit_sha=BASE,
                pull_request_number=12,
                pull_request_url="https://github.com/octo/demo/pull/12",
            )
        )
        one, two = job.configs
        # cpuset=0: the slow test took 4 ms on the base and 20 ms on the head; cpuset=0-1: the same.
        base_runs(one, [0.28, 0.29, 0.28, 0.30, 0.28], [0.004, 0.0042, 0.0038, 0.0041, 0.004])
        base_runs(two, [5.5, 5.2, 5.4, 5.3, 5.6], [1.85, 1.95, 1.80, 2.0, 1.9])
        session.flush()
        rows = pull_requests.record(session, job, Thresholds())
        session.commit()
        job_id = job.id
    verdicts = {(r.test_id, r.config_label): r.verdict for r in rows}
    assert verdicts[(TEST_SLOW, "cpuset=0")] == "regressed"
    assert verdicts[(TEST_SLOW, "cpuset=0-1")] == "unchanged"

    dashboard.add_user("ann", ["demo"])
    dashboard.sign_in("ann")
    page = dashboard.page(f"/jobs/{job_id}")
    assert "Trigger: <strong>pull request</strong>" in page
    assert 'href="https://github.com/octo/demo/pull/12"' in page and "faster-ws" in page and BASE[:10] in page
    comparison = page[page.index('id="base-comparison"') : page.index("</section>", page.index('id="base-comparison"'))]
    assert "Compared with base" in comparison
    first_row = comparison[comparison.index("<tbody>") : comparison.index("</tr>", comparison.index("<tbody>"))]
    assert TEST_SLOW in first_row and "regressed" in first_row and "cpuset=0" in first_row  # regressions first
    assert "1 regressed" in comparison and "unchanged" in comparison
    # The regressed test is a finding like any other, to be triaged.
    assert "slower than on the base commit" in page
