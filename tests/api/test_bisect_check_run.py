"""A bisect job's GitHub check run through the service: the job's change of state records
its notify step (services/jobs/lifecycle.py), the embedded worker runs it
(services/github/notify.py notify_github) and the fake GitHub server receives the check
run, apart from the push's own and on the right commit. The bisect's rows are built here,
as a gate or a hand-submitted bisect would store them, with a result of the real search
(tests/support/bisect_results.py); the last test runs the real bisect step."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import select

from services.jobs import ledger, lifecycle
from services.jobs.bisect_jobs import BisectSpec, submit_bisect
from services.measure.configs import parse_spec
from services.models import Bisect, Job, JobKind, JobSource, JobTask, Project, TaskState
from tests.conftest import PYTHON
from tests.service_support import GitHubServer, Recorded, register
from tests.support.bisect_history import TARGET, make_history
from tests.support.bisect_results import COMMITS, CONFIG, searched, step_at, stored

PROJECT = "octo/demo"
TEST = "tests/test_speed.py::test_slow"
PUSHED = COMMITS[-1]  # the push that brought the regression: the bad end


def check_runs_of(github_server: GitHubServer, job_id: int) -> list[Recorded]:
    return [r for r in github_server.check_runs() if r.body.get("external_id") == str(job_id)]


def wait_for(github_server: GitHubServer, job_id: int, status: str, timeout_s: float = 30) -> Recorded:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for request in check_runs_of(github_server, job_id):
            if request.body.get("status") == status:
                return request
        time.sleep(0.05)
    raise AssertionError(f"no {status} check run of job {job_id} reached GitHub: {github_server.requests}")


def notify_tasks_settled(api, job_id: int, timeout_s: float = 30) -> list[JobTask]:
    """The job's notify steps once none is pending or running."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with api.session_factory() as session:
            tasks = list(session.scalars(select(JobTask).where(JobTask.job_id == job_id, JobTask.step == "notify")))
            if tasks and all(task.state not in (TaskState.pending, TaskState.running) for task in tasks):
                return tasks
        time.sleep(0.05)
    raise AssertionError(f"the notify steps of job {job_id} did not settle: {tasks}")


def stored_bisect(api, *, head_sha: str | None, bad_sha: str | None = PUSHED) -> int:
    """A running bisect job from a GitHub push (``head_sha``; None: asked for by hand), its
    ends resolved to COMMITS' (the bad one to ``bad_sha``); its id."""
    with api.session_factory() as session:
        job = lifecycle.create_job(
            session,
            project=PROJECT,
            command=["python", "-m", "pytest", "-q"],
            configs=[parse_spec(CONFIG, (0, 1), machine="the nodes")],
            executor="local",
            workdir=None,
            repeat=1,
            timeout_s=None,
            source="github",
            probes=[],
            kind=JobKind.bisect,
        )
        session.add(
            JobSource(
                job_id=job.id,
                kind="git",
                repository_url="https://example.com/octo/demo.git",
                github_repository=PROJECT,
                github_head_sha=head_sha,
            )
        )
        session.add(
            Bisect(job_id=job.id, test_id=TEST, good=COMMITS[0], bad="main", good_sha=COMMITS[0], bad_sha=bad_sha)
        )
        lifecycle.mark_running(job)
        session.commit()
        return job.id


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_finished_bisect_from_a_push_reports_its_culprit_on_the_pushed_commit(api, github_server):
    job_id = stored_bisect(api, head_sha=PUSHED)
    # While it runs: the check run is created, in progress, apart from the push's own.
    with api.session_factory() as session:
        assert ledger.notify_step(session, session.get(Job, job_id), api.settings) is not None
        session.commit()
    started = wait_for(github_server, job_id, "in_progress")
    assert started.method == "POST" and started.path == f"/repos/{PROJECT}/check-runs"
    assert started.body["name"] == "lagtrace bisect" and started.body["head_sha"] == PUSHED
    assert started.body["output"]["title"].startswith(f"Bisecting {TEST} in {CONFIG} between ")

    # The step's end, as services/jobs/bisect_step.py ends it: the result, then finish.
    found = searched(step_at(9))
    with api.session_factory() as session:
        session.get(Bisect, job_id).result = stored(found, subject="make the cache synchronous")
        lifecycle.finish(session, api.settings, session.get(Job, job_id))
        session.commit()
    completed = wait_for(github_server, job_id, "completed")
    check_run_id = int(completed.path.rsplit("/", 1)[1])
    assert completed.method == "PATCH" and completed.path == f"/repos/{PROJECT}/check-runs/{check_run_id}"
    assert completed.headers["Authorization"] == "Bearer test-token"
    assert completed.body["name"] == "lagtrace bisect" and completed.body["head_sha"] == PUSHED
    assert completed.body["conclusion"] == "neutral"
    assert found.ratio is not None
    assert completed.body["output"]["title"] == (
        f"Culprit: {COMMITS[9][:10]} make the cache synchronous ({found.ratio:.2f}x)"
    )
    assert completed.body["details_url"] == f"http://lagtrace.test/jobs/{job_id}"
    assert "### Pairs judged" in completed.body["output"]["summary"]
    assert "actions" not in completed.body
    tasks = notify_tasks_settled(api, job_id)
    assert sorted(task.name for task in tasks) == ["notify:done", "notify:running"]
    assert all(task.state is TaskState.done for task in tasks)
    with api.session_factory() as session:
        assert session.get(JobSource, job_id).github_check_run_id == check_run_id
    assert len(check_runs_of(github_server, job_id)) == 2  # one created, then brought up to date


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_bisect_with_no_pushed_commit_reports_on_its_bad_end_once_it_is_known(api, github_server):
    # Resolved: the check run goes on the bad end.
    resolved = stored_bisect(api, head_sha=None)
    with api.session_factory() as session:
        session.get(Bisect, resolved).result = stored(searched(lambda index: 0.1, seed=3))
        lifecycle.finish(session, api.settings, session.get(Job, resolved))
        session.commit()
    completed = wait_for(github_server, resolved, "completed")
    assert completed.method == "POST" and completed.body["head_sha"] == PUSHED
    assert (
        completed.body["conclusion"] == "neutral" and completed.body["output"]["title"] == f"No commit changed {TEST}"
    )

    # Failed before the step resolved the bad end: nothing to attach a check run to; the
    # notify step is done without calling GitHub.
    unresolved = stored_bisect(api, head_sha=None, bad_sha=None)
    with api.session_factory() as session:
        lifecycle.fail_job(session, api.settings, session.get(Job, unresolved), None, "bad 'main': no such commit")
        session.commit()
    [task] = notify_tasks_settled(api, unresolved)
    assert task.name == "notify:failed" and task.state is TaskState.done and task.error is None
    assert check_runs_of(github_server, unresolved) == []
    with api.session_factory() as session:
        assert session.get(JobSource, unresolved).github_check_run_id is None


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_the_bisect_step_failing_on_a_revision_reports_the_failure_on_the_check_run(api, tmp_path, github_server):
    """The real step on a real repository: a revision it cannot resolve fails the job
    (services/jobs/bisect_step.py), and the check run says so, on the pushed commit."""
    shas = make_history(tmp_path / "repo", 4, 2)
    register(api.settings, api.session_factory, f"file://{tmp_path / 'repo'}", PROJECT)
    api.settings.allowed_executors = ["docker", "local"]

    def submit(good: str, bad: str, head_sha: str | None) -> int:
        spec = BisectSpec(
            project=PROJECT,
            test=TARGET,
            config=CONFIG,
            good=good,
            bad=bad,
            command=[PYTHON, "-m", "pytest", "-q", "test_work.py"],
            executor="local",
        )
        with api.session_factory() as session:
            project = session.scalar(select(Project).where(Project.name == PROJECT))
            job = submit_bisect(session, api.settings, project, spec, origin="api")
            source = session.get(JobSource, job.id)
            source.github_repository, source.github_head_sha = PROJECT, head_sha
            session.commit()
            return job.id

    unknown = submit("no-such-rev", shas[-1], head_sha=shas[-1])
    completed = wait_for(github_server, unknown, "completed", timeout_s=60)
    assert completed.body["conclusion"] == "failure" and completed.body["head_sha"] == shas[-1]
    assert completed.body["name"] == "lagtrace bisect"
    assert completed.body["output"]["title"].startswith("Bisect failed: good 'no-such-rev': no such commit")
    assert "Error: `good 'no-such-rev': no such commit" in completed.body["output"]["summary"]

    # Good after bad, asked for by hand: both ends resolved before the step refused the
    # range, so the check run goes on the bad end it resolved.
    backwards = submit(shas[-1], shas[0], head_sha=None)
    completed = wait_for(github_server, backwards, "completed", timeout_s=60)
    assert completed.body["conclusion"] == "failure" and completed.body["head_sha"] == shas[0]
    assert "is not an ancestor of bad" in completed.body["output"]["title"]
