"""A pull request's job page: where the job came from, and its tests compared with the base."""

from __future__ import annotations

from tests.web.sample_data import BASE_SHA, TEST_SLOW, store_pull_request_job


def test_a_pull_requests_job_page_shows_its_trigger_and_the_comparison_with_its_base(dashboard):
    with dashboard.session_factory() as session:
        job, rows = store_pull_request_job(session, dashboard.settings)
        session.commit()
        job_id = job.id
    verdicts = {(r.test_id, r.config_label): r.verdict for r in rows}
    assert verdicts[(TEST_SLOW, "cpuset=0")] == "regressed"
    assert verdicts[(TEST_SLOW, "cpuset=0-1")] == "unchanged"

    dashboard.add_user("ann", ["demo"])
    dashboard.sign_in("ann")
    page = dashboard.page(f"/jobs/{job_id}")
    assert "Trigger: <strong>pull request</strong>" in page
    assert 'href="https://github.com/octo/demo/pull/12"' in page and "faster-ws" in page and BASE_SHA[:10] in page
    comparison = page[page.index('id="base-comparison"') : page.index("</section>", page.index('id="base-comparison"'))]
    assert "Compared with base" in comparison
    first_row = comparison[comparison.index("<tbody>") : comparison.index("</tr>", comparison.index("<tbody>"))]
    assert TEST_SLOW in first_row and "regressed" in first_row and "cpuset=0" in first_row  # regressions first
    assert "1 regressed" in comparison and "unchanged" in comparison
    # The regressed test is a finding like any other, to be triaged.
    assert "slower than on the base commit" in page
