"""A bisect through the service: POST /api/v1/bisects on a registered git repository, the
embedded worker runs the search as a job (real git history, real pytest runs), and
GET /api/v1/jobs/{id} carries its result (docs/explanations/bisect.md)."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import select

from services.jobs.dispatch import BISECT
from services.measure.executors import docker_engine
from services.models import Bisect, JobConfig, JobTask, Run, RunKind
from tests.conftest import PYTHON, require
from tests.service_support import register
from tests.support.bisect_history import TARGET, commit_series, make_history

COMMITS = 16
SLOWER_FROM = 9  # commit 10 of 16 doubles test_slow's sleep
COMMAND = [PYTHON, "-m", "pytest", "-q", "test_work.py"]
PROJECT = "octo/demo"


def finished(api, job_id: int, timeout_s: float = 240) -> dict:
    """The job once it ended (a bisect job has no report to wait for: its result is ``bisect``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = api.get(f"/api/v1/jobs/{job_id}").get_json()
        if job["status"] in ("done", "failed", "cancelled"):
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} did not finish in {timeout_s} s: {job}")


def registered(api, tmp_path, **history) -> list[str]:
    """A repository of COMMITS commits registered as PROJECT, the API's token PROJECT's; its commits."""
    shas = make_history(tmp_path / "repo", COMMITS, SLOWER_FROM, **history)
    register(api.settings, api.session_factory, f"file://{tmp_path / 'repo'}", PROJECT)
    api.token = api.new_token(PROJECT)
    # The runs are timed on the host: this deployment trusts its submitters with local.
    api.settings.allowed_executors = ["docker", "local"]
    return shas


def ask(api, **body) -> dict:
    response = api.post("/api/v1/bisects", json={"project": PROJECT, "test": TARGET, "config": "cpuset=0", **body})
    assert response.status_code == 202, response.get_json()
    queued = response.get_json()
    assert queued["status"] == "queued" and queued["url"] == f"/api/v1/jobs/{queued['job_id']}"
    assert response.headers["Location"] == queued["url"]
    return queued


def stored_runs(api, job_id: int) -> list[Run]:
    with api.session_factory() as session:
        return list(
            session.scalars(select(Run).join(JobConfig).where(JobConfig.job_id == job_id).order_by(Run.id)).all()
        )


@pytest.mark.latency
@pytest.mark.parametrize(
    ("database_url", "executor"),
    [("sqlite", "local"), ("postgres", "local"), ("postgres", "docker")],
    indirect=["database_url"],
)
def test_the_commit_that_doubled_a_test_is_named_with_every_run_and_the_cost(api, tmp_path, executor):
    if executor == "docker":
        # The service's usual executor: each commit's worktree prepared, each run a container.
        problem = docker_engine.unavailable_reason(api.settings.docker_image)
        require(problem is None, f"no usable Docker engine: {problem}")
    shas = registered(api, tmp_path)
    started = time.monotonic()
    command = COMMAND if executor == "local" else ["python3", *COMMAND[1:]]
    queued = ask(api, good=shas[0], bad="main", command=command, executor=executor)
    job = finished(api, queued["job_id"])
    took_s = time.monotonic() - started
    assert job["status"] == "done", job["error"]
    assert job["kind"] == "bisect" and job["trigger"] == "api" and job["report"] is None
    bisect = job["bisect"]
    assert bisect["test"] == TARGET and bisect["config"] == "cpuset=0"
    # "main" was resolved on the fetched history, to the branch's last commit.
    assert (bisect["good"], bisect["bad"]) == (shas[0], "main")
    assert (bisect["good_sha"], bisect["bad_sha"]) == (shas[0], shas[-1])

    result = bisect["result"]
    assert result["verdict"] == "culprit", result["reason"]
    assert result["culprit"] == shas[SLOWER_FROM] and result["culprit_parent"] == shas[SLOWER_FROM - 1]
    assert result["culprit_subject"] == f"change {SLOWER_FROM}" and result["direction"] == "slower"
    assert 1.6 < result["ratio_low"] <= result["ratio"] <= result["ratio_high"] < 2.4, result
    assert result["range_commits"] == COMMITS and result["config"] == "cpuset=0"

    # Every run is stored in the job's configuration with the commit it ran at, each once,
    # and they are the result's runs: far fewer than every commit measured alike.
    runs = stored_runs(api, job["id"])
    assert len(runs) == len(result["runs"]) == result["cost"]["runs"] < COMMITS * 5 / 2
    assert [run.commit_sha for run in runs] == [run["commit"] for run in result["runs"]]
    assert {run.kind for run in runs} == {RunKind.bisect} and all(run.test_id == TARGET for run in runs)
    assert {run.commit_sha for run in runs} == {commit["sha"] for commit in result["commits"]}
    for run in result["runs"]:
        expected = 0.2 if shas.index(run["commit"]) >= SLOWER_FROM else 0.1
        assert expected <= run["duration_s"] < expected * 1.5, run
    cost = result["cost"]
    assert cost["says"].startswith(f"{cost['runs']} runs, {cost['wall_s']:.1f} s, ") or cost["says"].startswith(
        f"{cost['runs']} runs, {cost['wall_s']:.3f} s, "
    )
    assert cost["says"].endswith("the test's time") and 0.1 <= cost["test_s"] < 0.15
    # The progress counted its runs, and the checkouts are gone with the step.
    assert job["progress"]["runs_done"] == len(runs)
    [measured_in] = job["progress"]["configs"]
    assert measured_in["state"] == "done" and measured_in["worker"], measured_in
    assert [path.name for path in (api.settings.work_dir / "jobs").iterdir()] == []
    assert job["executor"] == executor
    print(f"\nservice bisect ({executor}): {cost['says']}; {len(result['commits'])} commits; {took_s:.1f} s end to end")


@pytest.mark.latency
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_range_where_nothing_changed_has_no_culprit_with_the_command_from_lagtrace_yml(api, tmp_path):
    shas = registered(api, tmp_path, lagtrace_yml=f"command: {PYTHON} -m pytest -q test_work.py\nexecutor: local\n")
    queued = ask(api, good=shas[0], bad=shas[SLOWER_FROM - 1])
    job = finished(api, queued["job_id"])
    assert job["status"] == "done", job["error"]
    assert job["command"] == COMMAND and job["executor"] == "local"  # read from .lagtrace.yml at the bad end
    result = job["bisect"]["result"]
    assert result["verdict"] == "no_culprit" and result["culprit"] is None, result["reason"]
    # The ends alone, to the first look that can decide.
    assert [commit["sha"] for commit in result["commits"]] == [shas[0], shas[SLOWER_FROM - 1]]
    assert len(result["runs"]) == len(stored_runs(api, job["id"])) == 10


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_an_unknown_revision_fails_the_job_naming_it(api, tmp_path):
    """Whether a revision exists is known only once the worker fetched the history: the
    request is accepted (202) and the job fails, its error naming the revision."""
    shas = registered(api, tmp_path)
    queued = ask(api, good="no-such-rev", bad=shas[-1], command=COMMAND, executor="local")
    job = finished(api, queued["job_id"], timeout_s=60)
    assert job["status"] == "failed"
    assert "good 'no-such-rev': no such commit, branch or tag" in job["error"], job["error"]
    assert job["bisect"]["result"] is None and stored_runs(api, job["id"]) == []

    # Good after bad: refused the same way, both named.
    queued = ask(api, good=shas[-1], bad=shas[0], command=COMMAND, executor="local")
    job = finished(api, queued["job_id"], timeout_s=60)
    assert job["status"] == "failed" and f"good {shas[-1]} is not an ancestor of bad {shas[0]}" in job["error"]


@pytest.mark.parametrize(
    ("change", "status", "field", "says"),
    [
        pytest.param({"project": "nobody/else"}, 422, "project", "no such project here", id="unknown-project"),
        pytest.param({"test": ""}, 422, "test", "at least 1 character", id="empty-test"),
        pytest.param({"config": "cpuset=x"}, 422, "config", "'x' is not a CPU number", id="malformed-config"),
        pytest.param({"config": "cores=2"}, 422, "config", "unknown key", id="unknown-config-key"),
        pytest.param({"config": "cpuset=7"}, 422, "config", "LAGTRACE_NODE_CPUS", id="config-beyond-the-nodes"),
        pytest.param({"good": "a..b"}, 422, "good", "not a branch, tag or commit name", id="malformed-rev"),
        pytest.param({"bad": None}, 422, "bad", "Field required", id="missing-bad"),
        pytest.param(
            {"command": ["make", "test"]}, 422, "command", "a test is timed in a pytest command", id="not-pytest"
        ),
        pytest.param({"executor": "local"}, 422, "executor", "not allowed on this server", id="executor-refused"),
        pytest.param({"colour": "blue"}, 422, "colour", "Extra inputs", id="unknown-field"),
    ],
)
def test_bad_input_is_refused_naming_the_field(sqlite_api, tmp_path, change, status, field, says):
    api = sqlite_api
    register(api.settings, api.session_factory, f"file://{tmp_path}/repo", PROJECT)
    api.token = api.new_token(PROJECT)
    body = {"project": PROJECT, "test": TARGET, "config": "cpuset=0", "good": "v1", "bad": "main"}
    body = {key: value for key, value in {**body, **change}.items() if value is not None}
    response = api.post("/api/v1/bisects", json=body)
    answer = response.get_json()
    assert response.status_code == status, answer
    assert field in [problem["field"] for problem in answer["problems"]], answer
    assert says in answer["error"], answer
    with api.session_factory() as session:
        assert session.scalars(select(Bisect)).all() == []


def test_a_project_of_archives_cannot_be_bisected(sqlite_api):
    # The fixture's token is project demo's, which has no registered repository.
    body = {"project": "demo", "test": TARGET, "config": "cpuset=0", "good": "v1", "bad": "main"}
    response = sqlite_api.post("/api/v1/bisects", json=body)
    answer = response.get_json()
    assert response.status_code == 422, answer
    assert answer["problems"][0]["field"] == "project" and "no registered git repository" in answer["error"]
    no_token = sqlite_api.client.post("/api/v1/bisects", json=body)
    assert no_token.status_code == 401


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_cancel_stops_the_search_after_the_run_under_way(api, tmp_path):
    shas = registered(api, tmp_path)
    queued = ask(api, good=shas[0], bad=shas[-1], command=COMMAND, executor="local")
    deadline = time.monotonic() + 60
    while len(stored_runs(api, queued["job_id"])) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    cancelled = api.post(f"/api/v1/jobs/{queued['job_id']}/cancel")
    assert cancelled.status_code == 200, cancelled.get_json()
    at_cancel = len(stored_runs(api, queued["job_id"]))
    job = finished(api, queued["job_id"])
    assert job["status"] == "cancelled" and job["bisect"]["result"] is None
    # The search stopped at its next checkpoint: after the run under way, if any.
    time.sleep(2)
    assert at_cancel <= len(stored_runs(api, queued["job_id"])) <= at_cancel + 1
    with api.session_factory() as session:
        # Its search step (the notify steps report the cancel to GitHub: the project has a repository there).
        [task] = session.scalars(
            select(JobTask).where(JobTask.job_id == queued["job_id"], JobTask.step == BISECT)
        ).all()
        assert task.state.value == "cancelled"


# A program that is no pytest suite, bisected on its whole wall time (docs/explanations/bisect.md).
APP = "import time\n\ntime.sleep({seconds})\n"


@pytest.mark.latency
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_program_is_bisected_on_its_wall_time_when_no_test_is_named(api, tmp_path):
    shas = commit_series(tmp_path / "repo", 5, lambda index: {"app.py": APP.format(seconds=0.3 if index >= 2 else 0.1)})
    register(api.settings, api.session_factory, f"file://{tmp_path / 'repo'}", PROJECT)
    api.token = api.new_token(PROJECT)
    api.settings.allowed_executors = ["docker", "local"]
    body = {"project": PROJECT, "config": "cpuset=0", "good": shas[0], "bad": shas[-1]}
    response = api.post("/api/v1/bisects", json={**body, "command": [PYTHON, "app.py"], "executor": "local"})
    assert response.status_code == 202, response.get_json()
    job = finished(api, response.get_json()["job_id"])
    assert job["status"] == "done", job["error"]
    assert job["bisect"]["test"] is None
    result = job["bisect"]["result"]
    assert result["verdict"] == "culprit" and result["culprit"] == shas[2], result["reason"]
    assert result["timed"] == "the command" and result["cost"]["says"].endswith("the command's time")
    assert all(run.test_id is None for run in stored_runs(api, job["id"]))
