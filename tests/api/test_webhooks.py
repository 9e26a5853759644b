"""GitHub deliveries: signatures, idempotency, jobs from .lagtrace.yml, check runs back."""

from __future__ import annotations

import json
import time

import pytest

from services.models import Job, JobSource, WebhookDelivery
from tests.service_support import SECRET, delivery_headers, make_repository, push_payload, register

LAGTRACE_YML = "command: python3 steady.py\nconfigs: [cpuset=0]\nrepeat: 2\n"


def deliver(api, payload, delivery, event="push", secret=SECRET, headers=None):
    body = json.dumps(payload).encode()
    return api.client.post(
        "/api/v1/webhooks/github",
        data=body,
        headers=headers if headers is not None else delivery_headers(body, delivery, event, secret),
    )


def wait_for_check_run(github_server, status: str, timeout_s: float = 60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for request in github_server.check_runs():
            if request.body.get("status") == status:
                return request
        time.sleep(0.1)
    raise AssertionError(f"no {status} check run reached GitHub: {github_server.requests}")


@pytest.mark.parametrize(
    "headers",
    [
        {"X-GitHub-Delivery": "d1", "X-GitHub-Event": "push"},
        {"X-GitHub-Delivery": "d1", "X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + "0" * 64},
        {"X-GitHub-Delivery": "d1", "X-GitHub-Event": "push", "X-Hub-Signature-256": "sha1=abc"},
        {"X-GitHub-Delivery": "d1", "X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=ünïcode"},
        "wrong-secret",
    ],
)
def test_a_delivery_without_a_valid_signature_is_rejected_and_nothing_stored(sqlite_api, tmp_path, headers):
    url, head = make_repository(tmp_path / "repo", LAGTRACE_YML)
    payload = push_payload(url, head)
    if headers == "wrong-secret":
        response = deliver(sqlite_api, payload, "d1", secret="not-the-secret")
    else:
        response = deliver(sqlite_api, payload, "d1", headers={**headers, "Content-Type": "application/json"})
    assert response.status_code == 401
    assert "X-Hub-Signature-256" in response.get_json()["error"]
    assert sqlite_api.count(Job) == 0 and sqlite_api.count(WebhookDelivery) == 0
    assert sqlite_api.dispatcher._queue.empty()  # nothing was enqueued either


def test_webhooks_are_off_without_a_secret(sqlite_api, tmp_path):
    url, head = make_repository(tmp_path / "repo", LAGTRACE_YML)
    sqlite_api.settings.github_webhook_secret = None
    response = deliver(sqlite_api, push_payload(url, head), "d1")
    assert response.status_code == 503 and sqlite_api.count(WebhookDelivery) == 0


@pytest.mark.parametrize(
    "payload,event,status",
    [
        ({"ref": "refs/heads/main"}, "push", 422),
        ({"action": "opened", "pull_request": {"number": "x"}}, "pull_request", 422),
        ([], "check_run", 422),
    ],
)
def test_signed_but_malformed_payloads_are_4xx_and_not_stored(sqlite_api, payload, event, status):
    response = deliver(sqlite_api, payload, "d-bad", event)
    assert response.status_code == status and response.get_json()["error"]
    assert sqlite_api.count(WebhookDelivery) == 0 and sqlite_api.count(Job) == 0


def test_a_signed_body_that_is_not_json_is_400(sqlite_api):
    body = b"not json"
    response = sqlite_api.client.post("/api/v1/webhooks/github", data=body, headers=delivery_headers(body, "d-raw"))
    assert response.status_code == 400


def test_the_same_delivery_twice_makes_one_job(sqlite_api, tmp_path):
    url, head = make_repository(tmp_path / "repo", LAGTRACE_YML)
    register(sqlite_api.settings, sqlite_api.session_factory, url)
    first = deliver(sqlite_api, push_payload(url, head), "same-delivery")
    second = deliver(sqlite_api, push_payload(url, head), "same-delivery")
    assert first.status_code == 202 and first.get_json()["duplicate"] is False
    assert second.status_code == 200 and second.get_json()["duplicate"] is True
    assert second.get_json()["job_id"] == first.get_json()["job_id"]
    assert sqlite_api.count(Job) == 1 and sqlite_api.count(WebhookDelivery) == 1
    assert sqlite_api.dispatcher._queue.qsize() == 1


def test_ping_and_uninteresting_events_are_recorded_without_a_job(sqlite_api):
    assert deliver(sqlite_api, {"zen": "Keep it logically awesome."}, "p1", "ping").get_json()["outcome"] == "pong"
    ignored = deliver(sqlite_api, {"action": "closed"}, "p2", "issues").get_json()
    assert ignored["outcome"] == "ignored: event issues" and ignored["job_id"] is None
    deleted = deliver(sqlite_api, {**push_payload("https://e/r.git", "0" * 40), "deleted": True}, "p3").get_json()
    assert deleted["outcome"] == "ignored: branch deleted"
    assert sqlite_api.count(Job) == 0 and sqlite_api.count(WebhookDelivery) == 3


@pytest.fixture
def octo(api):
    """The API as seen with a token of the project GitHub deliveries create (owner/name)."""
    api.token = api.new_token("octo/demo")
    return api


def test_a_push_runs_the_repository_config_and_reports_a_check_run(octo, tmp_path, github_server):
    api = octo
    url, head = make_repository(tmp_path / "repo", LAGTRACE_YML + "evidence: [strace]\n")
    register(api.settings, api.session_factory, url)
    response = deliver(api, push_payload(url, head), "push-1")
    assert response.status_code == 202, response.get_json()
    job = api.wait(response.get_json()["job_id"])
    assert job["status"] == "done", job["error"]
    assert job["source"] == "github" and job["project"] == "octo/demo"
    assert job["command"] == ["python3", "steady.py"] and job["configs"] == ["cpuset=0"] and job["repeat"] == 2
    assert job["evidence"] == ["strace"] and job["repository"]["commit"] == head

    completed = wait_for_check_run(github_server, "completed")
    started = wait_for_check_run(github_server, "in_progress")
    assert started.method == "POST" and started.path == "/repos/octo/demo/check-runs"
    assert started.headers["Authorization"] == "Bearer test-token"
    assert completed.method == "PATCH" and completed.path.startswith("/repos/octo/demo/check-runs/")
    assert completed.body["conclusion"] in ("success", "neutral")
    assert completed.body["head_sha"] == head
    assert completed.body["details_url"] == f"http://lagtrace.test/jobs/{job['id']}"
    assert "`cpuset=0`" in completed.body["output"]["summary"]


def test_a_bad_repository_config_fails_the_job_and_the_check_run_says_why(octo, tmp_path, github_server):
    api = octo
    url, head = make_repository(tmp_path / "repo", "command: python3 steady.py\nrepeat: 0\n")
    register(api.settings, api.session_factory, url)
    job = api.wait(deliver(api, push_payload(url, head), "push-bad").get_json()["job_id"])
    assert job["status"] == "failed" and "repeat" in job["error"] and ".lagtrace.yml" in job["error"]
    completed = wait_for_check_run(github_server, "completed")
    assert completed.body["conclusion"] == "failure" and "repeat" in completed.body["output"]["summary"]


def test_pull_request_and_check_run_rerequested_make_a_linked_rerun(octo, tmp_path, github_server):
    api = octo
    url, head = make_repository(tmp_path / "repo", LAGTRACE_YML)
    register(api.settings, api.session_factory, url)
    pull = {
        "action": "opened",
        "pull_request": {"number": 7, "head": {"sha": head, "ref": "feature", "repo": {"full_name": "octo/demo"}}},
        "repository": {"full_name": "octo/demo", "clone_url": url},
    }
    parent = api.wait(deliver(api, pull, "pr-1", "pull_request").get_json()["job_id"])
    assert parent["status"] == "done", parent["error"]
    completed = wait_for_check_run(github_server, "completed")
    check_run_id = int(completed.path.rsplit("/", 1)[1])

    rerequest = {
        "action": "rerequested",
        "check_run": {"id": check_run_id, "head_sha": head},
        "repository": {"full_name": "octo/demo", "clone_url": url},
    }
    response = deliver(api, rerequest, "rerun-1", "check_run")
    assert response.status_code == 202, response.get_json()
    child = api.wait(response.get_json()["job_id"])
    assert child["status"] == "done" and child["parent_id"] == parent["id"]
    assert child["comparison"]["parent_id"] == parent["id"]
    # The rerun reports on a new check run of the same commit.
    new_runs = [
        r for r in github_server.check_runs() if r.method == "POST" and r.body["external_id"] == str(child["id"])
    ]
    assert new_runs and new_runs[0].body["head_sha"] == head
    with api.session_factory() as session:
        assert session.get(JobSource, child["id"]).github_check_run_id not in (None, check_run_id)

    unknown = {**rerequest, "check_run": {"id": 1, "head_sha": head}}
    assert deliver(api, unknown, "rerun-2", "check_run").get_json()["outcome"] == "ignored: not a lagtrace check run"


def test_a_push_with_matrix_every_h_gets_a_scheduled_matrix_job_from_the_reconcilers_pass(octo, tmp_path):
    """docs/guides/github.md, scheduled matrix jobs: the push stores the schedule; once no
    matrix job of the command was created on main within it, the reconciler's pass creates
    one on the pushed commit, which runs like any job and shows its trigger."""
    import datetime as dt

    from sqlalchemy import select

    from services.jobs.reconcile import reconcile
    from services.models import MatrixSchedule, utcnow

    api = octo
    url, head = make_repository(tmp_path / "repo", LAGTRACE_YML + "kind: matrix\nmatrix_every_h: 1\n")
    register(api.settings, api.session_factory, url)
    push = api.wait(deliver(api, push_payload(url, head), "push-scheduled").get_json()["job_id"])
    assert push["status"] == "done", push["error"]

    def scheduled() -> list[dict]:
        listed = api.get("/api/v1/jobs").get_json()
        return [job for job in listed["jobs"] if job["trigger"] == "schedule"]

    def pass_() -> None:
        with api.session_factory() as session:
            reconcile(session, api.settings)
            session.commit()  # the outbox sends the new job's prepare step

    pass_()  # the push was itself a matrix job of the command on main: not due for an hour
    assert scheduled() == []
    with api.session_factory() as session:
        assert [(s.branch, s.every_h, s.job_id) for s in session.scalars(select(MatrixSchedule))] == [
            ("main", 1.0, push["id"])
        ]
        session.get(Job, push["id"]).created_at = utcnow() - dt.timedelta(hours=2)
        session.commit()
    pass_()
    [listed] = scheduled()
    job = api.wait(listed["id"])
    assert job["status"] == "done", job["error"]
    assert job["kind"] == "matrix" and job["source"] == "schedule" and job["parent_id"] is None
    assert job["branch"] == "main" and job["commit"] == head
    assert job["command"] == ["python3", "steady.py"] and job["configs"] == ["cpuset=0"] and job["repeat"] == 2
    pass_()  # its own creation reset the clock
    assert len(scheduled()) == 1
