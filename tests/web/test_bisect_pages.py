"""A bisect from the test's page: its form queues the job the API would (real git history,
real pytest runs by the embedded worker), the job's page shows the verdict, the culprit,
each measured commit and the cost, and the test's page lists it."""

from __future__ import annotations

import re
import time

import pytest

from services.jobs.lifecycle import create_job
from services.models import Bisect, Job, JobStatus, Project
from tests.conftest import PYTHON
from tests.service_support import register
from tests.support.bisect_history import TARGET, make_history

# Six commits, the fourth triples test_slow: the search measures commits 1, 6, 3 and 4.
COMMITS, SLOWER_FROM = 6, 3
LAGTRACE_YML = f"command: {PYTHON} -m pytest -q test_work.py\nexecutor: local\n"


def ended(dashboard, job_id: int, timeout_s: float = 180) -> Job:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with dashboard.session_factory() as session:
            job = session.get(Job, job_id)
            if job.status in (JobStatus.done, JobStatus.failed, JobStatus.cancelled):
                return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} did not end in {timeout_s} s")


@pytest.mark.latency
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_bisect_from_the_test_page_shows_on_the_job_and_test_pages(running_dashboard, tmp_path):
    dashboard = running_dashboard
    dashboard.settings.allowed_executors = ["docker", "local"]
    shas = make_history(tmp_path / "repo", COMMITS, SLOWER_FROM, fast_s=0.05, slow_s=0.15, lagtrace_yml=LAGTRACE_YML)
    register(dashboard.settings, dashboard.session_factory, f"file://{tmp_path / 'repo'}", "octo/demo")
    dashboard.add_user("ann", ["octo/demo"])
    assert dashboard.sign_in("ann").status_code == 302
    with dashboard.session_factory() as session:
        project_id = session.query(Project).filter_by(name="octo/demo").one().id
    form = {"project": project_id, "test_id": TARGET, "good": shas[0], "bad": "main", "config": "cpuset=0"}

    # Without the form's CSRF token nothing is queued.
    refused = dashboard.client.post("/tests/bisect", data=form)
    assert refused.status_code in (400, 403)

    answer = dashboard.post("/tests/bisect", form)
    assert answer.status_code == 302, answer.get_data(as_text=True)[:2000]
    job_id = int(answer.headers["Location"].rstrip("/").rsplit("/", 1)[1])
    job = ended(dashboard, job_id)
    assert job.status is JobStatus.done, job.error
    assert job.trigger == "dashboard"

    page = dashboard.page(f"/jobs/{job_id}")
    assert 'id="bisect"' in page and f"<code>{TARGET}</code>" in page
    verdict = re.sub(r"\s+", " ", page[page.index('id="bisect-verdict"') :].split("</p>", 1)[0])
    assert "<strong>culprit</strong>" in verdict, verdict
    assert (
        f"<code>{shas[SLOWER_FROM][:10]}</code> “change {SLOWER_FROM}” (commit {SLOWER_FROM + 1} of {COMMITS})"
        in verdict
    )
    assert "made the test slower" in verdict and "95 % interval" in verdict
    assert re.search(r'id="bisect-cost">Cost: 20 runs, [\d.]+ s, \d+x the test&#39;s time\.', page), page
    # Each measured commit with its median and runs, and the plot of them by commit.
    rows = re.findall(r"<td class=\"num\">(\d) of 6</td><td><code>([0-9a-f]{10})</code>", page)
    assert sorted(int(index) for index, _ in rows) == [1, 3, 4, 6], rows
    assert all(sha == shas[int(index) - 1][:10] for index, sha in rows)
    assert '<svg class="plot bisect"' in page and 'class="culprit"' in page
    assert 'id="rerun"' not in page  # a bisect is not rerun as a matrix job

    test_page = dashboard.page(f"/tests/entry?project={project_id}&id={TARGET}")
    listed = test_page[test_page.index('id="bisects"') :].split("</table>", 1)[0]
    assert f'href="/jobs/{job_id}">#{job_id}</a>' in listed and "<strong>culprit</strong>" in listed
    assert f"<code>{shas[SLOWER_FROM][:10]}</code> “change {SLOWER_FROM}”" in listed
    assert 'id="bisect-form"' in test_page and 'action="/tests/bisect"' in test_page

    # A malformed configuration: the page again, the form as typed, its problem named.
    wrong = dashboard.post("/tests/bisect", {**form, "config": "cpuset=x"})
    assert wrong.status_code == 422
    html = wrong.get_data(as_text=True)
    assert "The bisect was not queued" in html and "config: cpuset=&#39;x&#39;: &#39;x&#39; is not a CPU number" in html
    assert 'value="cpuset=x"' in html
    with dashboard.session_factory() as session:
        assert session.query(Job).count() == 1

    # A bisect a regression started names the job whose verdict started it.
    with dashboard.session_factory() as session:
        finder = create_job(
            session,
            project="octo/demo",
            command=[PYTHON, "-m", "pytest"],
            configs=[],
            executor="local",
            workdir=None,
            repeat=1,
            timeout_s=None,
            source="api",
        )
        session.get(Bisect, job_id).started_by_job_id = finder.id
        session.commit()
        finder_id = finder.id
    started = dashboard.page(f"/jobs/{job_id}")
    assert f'id="bisect-started-by">Started by <a href="/jobs/{finder_id}">job {finder_id}</a>' in started
    assert 'id="bisect-started-by"' not in page
