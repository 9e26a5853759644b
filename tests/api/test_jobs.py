"""Jobs through the API, run for real by the embedded dispatcher, on SQLite and Postgres."""

from __future__ import annotations

import io
import json
import os
import re

import pytest
from sqlalchemy import select

from cli.submit import pack_directory
from services.measure.configs import format_cpulist
from services.models import ApiToken, Finding, Job, TriageStatus
from tests.conftest import EXAMPLES
from tests.service_support import make_repository

STEADY = ["python3", "steady.py"]
CPUS = tuple(sorted(os.sched_getaffinity(0)))
MISSING_CPU = max(CPUS) + 8  # cpuset=9 on a 2-CPU machine


def create(api, **body):
    response = api.post("/api/v1/jobs", json=body)
    assert response.status_code == 201, response.get_json()
    return response


def test_a_job_on_a_repository_is_run_and_reported(api, tmp_path):
    url, head = make_repository(tmp_path / "repo", None)
    response = create(api, repository={"url": url, "ref": "main"}, command=STEADY, configs=["cpuset=0"], repeat=2)
    job = response.get_json()
    assert response.headers["Location"].endswith(f"/api/v1/jobs/{job['id']}")
    assert job["status"] == "queued" and job["report"] is None and job["source"] == "api"

    done = api.wait(job["id"])
    assert done["status"] == "done", done["error"]
    assert done["repository"] == {"url": url, "ref": "main", "commit": head}
    assert done["progress"] == {**done["progress"], "phase": "done", "runs_done": 2, "runs_planned": 2, "fraction": 1.0}
    assert done["progress"]["configs"][0]["state"] == "done"
    report = done["report"]
    assert report["schema"] == "lagtrace.report/v1"
    assert report["command"] == STEADY and [c["label"] for c in report["configs"]] == ["cpuset=0"]
    assert all(run["exit_code"] == 0 for run in report["configs"][0]["runs"])
    # Checkouts are per task and removed afterwards: nodes keep nothing.
    assert not any((api.settings.work_dir / "jobs").rglob("steady.py"))


def test_a_job_on_an_uploaded_directory(api):
    response = api.post(
        "/api/v1/jobs",
        data={
            "job": json.dumps({"command": STEADY, "configs": ["cpuset=0"], "repeat": 1}),
            "archive": (io.BytesIO(pack_directory(EXAMPLES)), "code.tar.gz"),
        },
        content_type="multipart/form-data",
    )
    assert response.status_code == 201, response.get_json()
    done = api.wait(response.get_json()["id"])
    assert done["status"] == "done", done["error"]
    assert done["archive"] is True and done["repository"] is None


@pytest.mark.parametrize(
    "body,message",
    [
        ({"command": ["no-such-program-here"]}, "not found on PATH"),
        (
            {"command": STEADY, "configs": [f"cpuset={MISSING_CPU}"]},
            # The docker executor counts its engine's CPUs (here all of the machine's).
            f"cpuset={MISSING_CPU}: CPU {MISSING_CPU} does not exist on this worker('s Docker engine)? "
            rf"\(CPUs {format_cpulist(CPUS)}\)",
        ),
    ],
)
def test_what_only_the_worker_can_check_fails_the_job_with_a_reason(api, tmp_path, body, message):
    # The service is told the nodes have more CPUs than this worker has: only it can tell.
    api.settings.node_cpus = MISSING_CPU + 1
    url, _ = make_repository(tmp_path / "repo", None)
    job = create(api, repository={"url": url}, **body).get_json()
    done = api.wait(job["id"])
    assert done["status"] == "failed" and re.search(message, done["error"]), done["error"]


def test_a_repository_that_cannot_be_cloned_fails_the_job(api, tmp_path):
    job = create(api, repository={"url": f"file://{tmp_path}/missing"}, command=STEADY).get_json()
    done = api.wait(job["id"])
    assert done["status"] == "failed" and "git fetch failed" in done["error"]


def test_rerun_makes_a_linked_job_compared_with_its_parent(api, tmp_path):
    url, head = make_repository(tmp_path / "repo", None)
    parent = api.wait(
        create(api, repository={"url": url, "ref": "main"}, command=STEADY, configs=["cpuset=0"], repeat=2).get_json()[
            "id"
        ]
    )
    response = api.post(f"/api/v1/jobs/{parent['id']}/rerun", json={"configs": ["cpuset=0", "cpuset=0-1"]})
    assert response.status_code == 201, response.get_json()
    child = api.wait(response.get_json()["id"])
    assert child["status"] == "done", child["error"]
    assert child["parent_id"] == parent["id"]
    assert child["repository"]["commit"] == head and child["command"] == STEADY and child["repeat"] == 2
    comparison = child["comparison"]
    assert comparison["parent_id"] == parent["id"]
    by_label = {c["label"]: c for c in comparison["configs"]}
    assert by_label["cpuset=0"]["parent_median_s"] == parent["report"]["configs"][0]["wall_s"]["median"]
    assert by_label["cpuset=0"]["ratio"] > 0
    assert by_label["cpuset=0-1"]["parent_median_s"] is None and by_label["cpuset=0-1"]["median_s"] > 0
    assert set(comparison["findings"]) == {"still", "new", "gone"}


def test_list_filters_and_pages(api, tmp_path):
    url, _ = make_repository(tmp_path / "repo", None)
    first = api.wait(
        create(api, repository={"url": url}, command=STEADY, configs=["cpuset=0"], repeat=1).get_json()["id"]
    )
    second = api.wait(create(api, repository={"url": url}, command=["missing-program"]).get_json()["id"])
    listed = api.get("/api/v1/jobs").get_json()
    assert [j["id"] for j in listed["jobs"]] == [second["id"], first["id"]]
    # The page reads its jobs' sources and configurations in one query each, not per job.
    assert [j["repository"]["url"] for j in listed["jobs"]] == [url, url]
    assert listed["jobs"][1]["configs"] == ["cpuset=0"]
    assert [j["id"] for j in api.get("/api/v1/jobs?status=failed").get_json()["jobs"]] == [second["id"]]
    page = api.get("/api/v1/jobs?limit=1").get_json()
    assert [j["id"] for j in page["jobs"]] == [second["id"]]
    rest = api.get(f"/api/v1/jobs?limit=1&before_id={page['next_before_id']}").get_json()
    assert [j["id"] for j in rest["jobs"]] == [first["id"]]


def test_another_projects_token_sees_nothing(api, tmp_path):
    url, _ = make_repository(tmp_path / "repo", None)
    job = create(api, repository={"url": url}, command=STEADY, configs=["cpuset=0"], repeat=1).get_json()
    api.wait(job["id"])
    other = {"Authorization": f"Bearer {api.new_token('other-team')}"}
    assert api.client.get(f"/api/v1/jobs/{job['id']}", headers=other).status_code == 404
    assert api.client.get("/api/v1/jobs", headers=other).get_json()["jobs"] == []
    assert (
        api.client.post(f"/api/v1/jobs/{job['id']}/rerun", json={"configs": ["cpuset=0"]}, headers=other).status_code
        == 404
    )


def test_a_tokens_last_use_is_kept_after_a_read_and_written_at_most_once_a_minute(sqlite_api):
    def last_used():
        with sqlite_api.session_factory() as session:
            return session.scalar(select(ApiToken.last_used_at))

    assert last_used() is None
    assert sqlite_api.get("/api/v1/jobs").status_code == 200
    first = last_used()
    assert first is not None  # a read commits nothing else, but the token's use is kept
    assert sqlite_api.get("/api/v1/jobs").status_code == 200
    assert last_used() == first  # within the minute: no write, so no lock on the token's row


def test_cancel_a_queued_job_then_again(sqlite_api):
    job = sqlite_api.post(
        "/api/v1/jobs", json={"repository": {"url": "https://example.com/r.git"}, "command": STEADY}
    ).get_json()
    response = sqlite_api.post(f"/api/v1/jobs/{job['id']}/cancel")
    assert response.status_code == 200
    cancelled = response.get_json()
    assert cancelled["status"] == "cancelled" and "alice" in cancelled["error"]
    again = sqlite_api.post(f"/api/v1/jobs/{job['id']}/cancel")
    assert again.status_code == 409 and "already cancelled" in again.get_json()["error"]


def test_findings_are_listed_filtered_and_triaged_with_history(sqlite_api):
    job_id = sqlite_api.post(
        "/api/v1/jobs", json={"repository": {"url": "https://example.com/r.git"}, "command": STEADY}
    ).get_json()["id"]
    with sqlite_api.session_factory() as session:
        job = session.get(Job, job_id)
        for kind, severity in (("cpu_sensitivity", "high"), ("off_cpu_wait", "low")):
            session.add(Finding(job=job, kind=kind, severity=severity, title=kind, detail="d", fingerprint=kind * 2))
        session.commit()
    listed = sqlite_api.get("/api/v1/findings").get_json()["findings"]
    assert {f["kind"] for f in listed} == {"cpu_sensitivity", "off_cpu_wait"}
    [high] = sqlite_api.get("/api/v1/findings?severity=high").get_json()["findings"]

    response = sqlite_api.client.patch(
        f"/api/v1/findings/{high['id']}",
        headers=sqlite_api.auth,
        json={"status": "acknowledged", "assignee": "bob", "note": "GIL hand-off"},
    )
    assert response.status_code == 200, response.get_json()
    triaged = response.get_json()
    assert (triaged["status"], triaged["assignee"], triaged["note"]) == ("acknowledged", "bob", "GIL hand-off")
    cleared = sqlite_api.client.patch(
        f"/api/v1/findings/{high['id']}", headers=sqlite_api.auth, json={"assignee": None}
    ).get_json()
    assert cleared["assignee"] is None and cleared["status"] == "acknowledged"
    assert [(h["actor"], h["status"], h["assignee"]) for h in cleared["history"]] == [
        ("alice", "acknowledged", "bob"),
        ("alice", "acknowledged", None),
    ]
    [still_new] = sqlite_api.get("/api/v1/findings?status=new").get_json()["findings"]
    assert still_new["kind"] == "off_cpu_wait"
    with sqlite_api.session_factory() as session:
        assert session.get(Finding, high["id"]).status is TriageStatus.acknowledged


def test_evidence_artifacts_are_downloaded_by_their_project_only(api, tmp_path):
    url, _ = make_repository(tmp_path / "repo", None)
    # A second of sleep: long enough for py-spy to attach and sample whatever the load.
    job = api.wait(
        create(
            api,
            repository={"url": url},
            command=["python3", "-c", "import time; time.sleep(1)"],
            configs=["cpuset=0"],
            repeat=1,
            evidence=["pyspy"],
        ).get_json()["id"]
    )
    assert job["status"] == "done", job["error"]
    assert job["evidence"] == ["pyspy"]
    stored = [a for e in job["report"]["evidence"] for a in e["artifacts"] if a.get("key")]
    assert stored, job["report"]["evidence"]
    artifact = stored[0]
    response = api.get(f"/api/v1/artifacts/{artifact['key']}")
    assert response.status_code == 200
    assert len(response.data) == artifact["size"]
    assert artifact["name"] in response.headers["Content-Disposition"]
    other = {"Authorization": f"Bearer {api.new_token('other-team')}"}
    assert api.client.get(f"/api/v1/artifacts/{artifact['key']}", headers=other).status_code == 404
    assert api.get(f"/api/v1/artifacts/job-{job['id']}/run-1/../../etc/passwd").status_code == 404
    assert api.get("/api/v1/artifacts/not-a-key").status_code == 404


def test_a_configuration_naming_cpus_the_nodes_lack_is_refused_when_submitted(sqlite_api):
    """cpuset=99 was accepted and failed by the worker later; the service knows the nodes'
    CPUs (LAGTRACE_NODE_CPUS, by default its own host's) and says so at once."""
    body = {"repository": {"url": "https://example.com/r.git"}, "command": STEADY}
    count = len(CPUS)
    refused = sqlite_api.post("/api/v1/jobs", json={**body, "configs": ["cpuset=0", "cpuset=99"]})
    assert refused.status_code == 422
    message = (
        f"configs.1: cpuset=99: CPU 99 does not exist on the nodes (CPUs {format_cpulist(CPUS)}) "
        f"(LAGTRACE_NODE_CPUS={count})"
    )
    assert refused.get_json() == {"error": message, "problems": [{"field": "configs.1", "message": message}]}
    quota = sqlite_api.post("/api/v1/jobs", json={**body, "configs": [f"cpus={count + 1}"]})
    assert quota.status_code == 422 and f"more than the {count} CPUs on the nodes" in quota.get_json()["error"]
    assert sqlite_api.count(Job) == 0
    # A node class with more CPUs than this host: said in the setting, and then accepted.
    sqlite_api.settings.node_cpus = 128
    assert sqlite_api.post("/api/v1/jobs", json={**body, "configs": ["cpuset=99"]}).status_code == 201
