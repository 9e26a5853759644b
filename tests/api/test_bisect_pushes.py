"""A push of several commits whose gate finds a test regressed starts a bisect between the
push's first and last commit, which names the commit that slowed it (real git history,
real pytest runs, PostgreSQL, the fake GitHub server: docs/guides/github.md)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from services.jobs.bisect_jobs import BisectSpec, submit_bisect
from services.jobs.lifecycle import cancel_job
from services.models import Bisect, Job, JobSource, Project
from tests.api.test_bisects import finished
from tests.api.test_pull_requests import completed_check_run
from tests.api.test_webhooks import deliver
from tests.service_support import push_payload, register
from tests.support.bisect_history import TARGET, make_history

GATE_YML = "command: python3 -m pytest -q test_work.py\nconfigs: [cpuset=0]\nrepeat: 5\nevidence: []\nkind: gate\n"
COMMITS = 6
SLOWER_FROM = 3  # the push of commits 1-5 brings commit 3, which doubles test_slow's sleep


def pushed(url: str, before: str, shas: list[str]) -> dict:
    """GitHub's push body for ``shas`` on top of ``before``."""
    return {**push_payload(url, shas[-1]), "before": before, "commits": [{"id": sha} for sha in shas]}


# Latency: its gate must find a 2x slower test `regressed` on cpuset=0, and the bisect
# must tell commits apart there; beside the parallel tier's workers that core is shared.
@pytest.mark.latency
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_gates_regression_on_a_push_of_several_commits_is_bisected_to_its_commit(api, tmp_path, github_server):
    api.token = api.new_token("octo/demo")
    shas = make_history(tmp_path / "repo", COMMITS, SLOWER_FROM, lagtrace_yml=GATE_YML)
    url = f"file://{tmp_path / 'repo'}"
    register(api.settings, api.session_factory, url)
    # History first: commit 0 pushed twice (a new branch, then again), 12 runs of each test.
    for n, before in enumerate(["0" * 40, shas[0]]):
        response = deliver(api, pushed(url, before, shas[:1]), f"main-{n}")
        assert response.status_code == 202, response.get_json()
        first = api.wait(response.get_json()["job_id"], timeout_s=240)
        assert first["status"] == "done" and not first["report"]["findings"], first
    with api.session_factory() as session:
        assert session.scalar(select(Bisect.job_id)) is None  # nothing regressed, nothing bisected

    response = deliver(api, pushed(url, shas[0], shas[1:]), "main-push")
    assert response.status_code == 202, response.get_json()
    gate_job = api.wait(response.get_json()["job_id"], timeout_s=240)
    verdicts = {test["test"]: test["verdict"] for test in gate_job["report"]["gate"]["tests"]}
    assert verdicts[TARGET] == "regressed", gate_job["report"]["gate"]
    [note] = [note for note in gate_job["report"]["notes"] if note.startswith("bisect job")]
    assert f"which of the 5 pushed commits {shas[0][:10]}..{shas[-1][:10]} slowed {TARGET}" in note, note

    with api.session_factory() as session:
        [row] = session.scalars(select(Bisect)).all()
        bisect_id = row.job_id
        assert (row.test_id, row.good, row.bad, row.started_by_job_id) == (TARGET, shas[0], shas[-1], gate_job["id"])
        assert session.get(Job, bisect_id).trigger == "regression"
        source = session.get(JobSource, bisect_id)
        assert (source.github_repository, source.github_head_sha) == ("octo/demo", shas[-1])
    job = finished(api, bisect_id, timeout_s=300)
    assert job["status"] == "done", job["error"]
    result = job["bisect"]["result"]
    assert job["bisect"]["config"] == "cpuset=0" and job["bisect"]["started_by_job"] == gate_job["id"]
    assert result["verdict"] == "culprit" and result["culprit"] == shas[SLOWER_FROM], result
    assert 1.5 < result["ratio"] < 2.5, result
    # The push's check run names the bisect; the bisect's own goes on the pushed commit.
    gate_check = completed_check_run(github_server, gate_job["id"])
    assert f"bisect job {bisect_id}" in gate_check.body["output"]["summary"]
    check = completed_check_run(github_server, bisect_id)
    assert check.body["name"] == "lagtrace bisect" and check.body["head_sha"] == shas[-1]
    assert check.body["conclusion"] == "neutral"
    assert check.body["output"]["title"].startswith(f"Culprit: {shas[SLOWER_FROM][:10]}"), check.body["output"]


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_push_of_one_commit_a_force_push_or_a_new_branch_keeps_no_range_to_bisect(api, tmp_path):
    api.token = api.new_token("octo/demo")
    shas = make_history(tmp_path / "repo", 3, 2, lagtrace_yml=GATE_YML)
    url = f"file://{tmp_path / 'repo'}"
    register(api.settings, api.session_factory, url)
    bodies = {
        "new-branch": pushed(url, "0" * 40, shas),
        "force": {**pushed(url, shas[0], shas[1:]), "forced": True},
        "one": pushed(url, shas[1], shas[2:]),
        "two": pushed(url, shas[0], shas[1:]),
    }
    ranges = {}
    for delivery, body in bodies.items():
        response = deliver(api, body, delivery)
        assert response.status_code == 202, response.get_json()
        with api.session_factory() as session:
            source = session.get(JobSource, response.get_json()["job_id"])
            ranges[delivery] = (source.before_commit_sha, source.pushed_commits)
    assert ranges == {"new-branch": (None, None), "force": (None, None), "one": (shas[1], 1), "two": (shas[0], 2)}


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_re_run_on_a_bisects_check_run_searches_the_same_range_again(api, tmp_path):
    api.token = api.new_token("octo/demo")
    shas = make_history(tmp_path / "repo", 3, 2, lagtrace_yml=GATE_YML)
    register(api.settings, api.session_factory, f"file://{tmp_path / 'repo'}")
    with api.session_factory() as session:
        project = session.scalar(select(Project).where(Project.name == "octo/demo"))
        spec = BisectSpec(project="octo/demo", test=TARGET, config="cpuset=0", good=shas[0], bad=shas[-1])
        parent = submit_bisect(session, api.settings, project, spec, origin="regression", bad_sha=shas[-1])
        cancel_job(session, api.settings, parent, "test")  # ended: nothing of it runs here
        session.get(JobSource, parent.id).github_check_run_id = 4242
        session.commit()
        parent_id = parent.id
    payload = {
        "action": "rerequested",
        "check_run": {"id": 4242, "head_sha": shas[-1]},
        "repository": {"full_name": "octo/demo"},
    }
    response = deliver(api, payload, "rerun-bisect", "check_run")
    assert response.status_code == 202, response.get_json()
    assert (
        response.get_json()["outcome"] == f"bisect again: job {response.get_json()['job_id']} repeats job {parent_id}"
    )
    with api.session_factory() as session:
        again = session.get(Job, response.get_json()["job_id"])
        row = session.get(Bisect, again.id)
        assert again.kind.value == "bisect" and again.parent_id == parent_id and again.trigger == "rerun"
        assert (row.test_id, row.good, row.bad) == (TARGET, shas[0], shas[-1])
        assert [c.label for c in again.configs] == ["cpuset=0"]
        assert session.get(JobSource, again.id).github_head_sha == shas[-1]
