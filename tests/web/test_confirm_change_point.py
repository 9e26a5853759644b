"""One click on a slower_since finding screens its two commits interleaved, base against
head, as a pull request's are: the last fast commit as the base, the first slow as the head."""

from __future__ import annotations

import random
from urllib.parse import quote

from services.jobs.dispatch import PREPARE
from services.models import Finding, Job, JobSource, JobTask, Project
from tests.support import branch_history


def test_confirm_submits_a_base_against_head_job_of_the_two_commits(dashboard):
    dashboard.add_user("ann", ["shop"])
    rng = random.Random(24)
    with dashboard.session_factory() as session:
        for n in range(branch_history.STEP_AT + 4):
            branch_history.push(session, dashboard.settings, rng, n)
        session.commit()
        finding = session.query(Finding).filter_by(kind="slower_since").one()
        finding_id, culprit = finding.id, finding.job_id
        jobs_before = session.query(Job).count()
    first_slow, last_fast = (
        branch_history.commit(branch_history.STEP_AT),
        branch_history.commit(branch_history.STEP_AT - 1),
    )
    assert dashboard.sign_in("ann").status_code == 302

    page = dashboard.page(f"/findings/{finding_id}")
    assert f'action="/findings/{finding_id}/confirm"' in page
    assert f"confirm: screen {last_fast[:10]} and {first_slow[:10]} interleaved" in page
    # The finding on its job's page carries the same button.
    assert f'action="/findings/{finding_id}/confirm"' in dashboard.page(f"/jobs/{culprit}")

    # Without the form's CSRF token nothing is queued.
    refused = dashboard.client.post(f"/findings/{finding_id}/confirm")
    assert refused.status_code in (400, 403)
    with dashboard.session_factory() as session:
        assert session.query(Job).count() == jobs_before

    answer = dashboard.post(f"/findings/{finding_id}/confirm", {}, form_page=f"/findings/{finding_id}")
    assert answer.status_code == 302
    job_id = int(answer.headers["Location"].rstrip("/").rsplit("/", 1)[1])
    with dashboard.session_factory() as session:
        job = session.get(Job, job_id)
        source = session.get(JobSource, job_id)
        # A comparison: the first slow commit is the head, the last fast one its base.
        assert source.commit_sha == first_slow and source.base_commit_sha == last_fast
        assert source.repository_url == "https://example.invalid/shop.git"
        assert source.pull_request_number is None and source.github_head_sha is None  # no check run on old commits
        assert job.trigger == "confirm" and job.parent_id == culprit
        # The test alone, in the configuration its history stepped in, without a drill.
        assert branch_history.STEPPED in " ".join(job.command)
        assert [c.label for c in job.configs] == [branch_history.CONFIG]
        assert job.probes == []
        assert session.query(JobTask).filter_by(job_id=job_id, name=PREPARE).count() == 1
    html = dashboard.page(f"/jobs/{job_id}")
    assert first_slow[:10] in html and last_fast[:10] in html


def test_the_tests_page_offers_to_bisect_the_push_that_made_the_step(dashboard):
    # A step between two pushes may be many commits: the test's page fills its bisect form
    # with the last fast and the first slow commit, in the step's configuration.
    dashboard.add_user("ann", ["shop"])
    rng = random.Random(24)
    with dashboard.session_factory() as session:
        for n in range(branch_history.STEP_AT + 4):
            branch_history.push(session, dashboard.settings, rng, n)
        session.query(Project).filter_by(name="shop").one().repository_url = "https://example.invalid/shop.git"
        session.commit()
        finding = session.query(Finding).filter_by(kind="slower_since").one()
        project_id, finding_id = finding.job.project_id, finding.id
    assert dashboard.sign_in("ann").status_code == 302
    page = dashboard.page(f"/tests/entry?project={project_id}&id={quote(branch_history.STEPPED)}")
    form = page[page.index('id="bisect-form"') :]
    assert f'name="good" required maxlength="255" value="{branch_history.commit(branch_history.STEP_AT - 1)}"' in form
    assert f'name="bad" required maxlength="255" value="{branch_history.commit(branch_history.STEP_AT)}"' in form
    assert f'name="config" required maxlength="200" value="{branch_history.CONFIG}"' in form
    assert f'href="/findings/{finding_id}"' in form
