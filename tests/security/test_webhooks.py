"""Webhooks: a repository nobody registered, a replayed body, a wrong project's secret,
and pull requests from forks that bring their own .lagtrace.yml."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from services.models import Job, Run, WebhookDelivery
from tests.service_support import SECRET, delivery_headers, make_repository, push_payload, register

BASE_YML = "command: python3 steady.py\nconfigs: [cpuset=0]\nrepeat: 1\nevidence: []\n"


def test_an_unregistered_repositorys_delivery_starts_nothing(service, tmp_path):
    # Signed with the server-wide secret (a leaked one, say), naming any project and URL.
    url, head = make_repository(tmp_path / "repo", BASE_YML)
    response = service.deliver(push_payload(url, head, full_name="mallory/anything"), "d-unregistered")
    assert response.status_code == 404, response.get_json()
    assert "not registered" in response.get_json()["error"]
    assert "`lagtrace repo register mallory/anything --project PROJECT`" in response.get_json()["error"]
    assert response.get_json()["problems"][0]["field"] == "repository.full_name"
    assert service.count(Job) == 0 and service.count(WebhookDelivery) == 0


def test_the_clone_url_comes_from_the_registration_not_the_payload(service, tmp_path):
    url, head = make_repository(tmp_path / "repo", BASE_YML)
    evil_url, _ = make_repository(tmp_path / "evil", "command: python3 -c 'evil'\n")
    register(service.settings, service.session_factory, url)
    response = service.deliver(
        {**push_payload(evil_url, head), "repository": {"full_name": "octo/demo", "clone_url": evil_url}}, "d-url"
    )
    job = service.wait(response.get_json()["job_id"])
    assert job["repository"]["url"] == url and job["command"] == ["python3", "steady.py"]


def test_a_repository_with_its_own_secret_refuses_the_server_wide_one(service, tmp_path):
    url, head = make_repository(tmp_path / "repo", BASE_YML)
    own = register(service.settings, service.session_factory, url, secret="octo-demo-own-secret-0123")
    refused = service.deliver(push_payload(url, head), "d-global", secret=SECRET)
    assert refused.status_code == 401 and service.count(Job) == 0
    accepted = service.deliver(push_payload(url, head), "d-own", secret=own)
    assert accepted.status_code == 202, accepted.get_json()


def test_a_replayed_delivery_under_a_new_id_is_refused(service, tmp_path):
    url, head = make_repository(tmp_path / "repo", BASE_YML)
    register(service.settings, service.session_factory, url)
    first = service.deliver(push_payload(url, head), "d-original")
    assert first.status_code == 202
    replay = service.deliver(push_payload(url, head), "d-replayed-new-id")
    assert replay.status_code == 409 and "replay" in replay.get_json()["error"]
    # What is wrong is the delivery id, not the URL's path.
    assert replay.get_json()["problems"] == [
        {"field": "header.X-GitHub-Delivery", "message": replay.get_json()["error"]}
    ]
    assert "delivered before as d-original" in replay.get_json()["error"]
    assert service.count(Job) == 1 and service.count(WebhookDelivery) == 1
    service.wait(first.get_json()["job_id"])


def fork_pull_request(tmp_path) -> tuple[str, str, str, dict]:
    """A base repository and a pull request from a fork whose .lagtrace.yml asks for the host."""
    url, base_sha = make_repository(tmp_path / "repo", BASE_YML)
    repo = tmp_path / "repo"
    git = ["git", "-c", "user.name=f", "-c", "user.email=f@example.com", "-C", str(repo)]
    marker = tmp_path / "fork-ran-on-the-host"
    evil = json.dumps(["python3", "-c", f"open({str(marker)!r}, 'w')"])
    subprocess.run([*git, "checkout", "-qb", "fork-branch"], check=True)
    (repo / ".lagtrace.yml").write_text(
        f"command: {evil}\nexecutor: local\nimage: lagtrace-deps:other-project\nrepeat: 100\n"
    )
    subprocess.run([*git, "commit", "-qam", "the fork's config"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    subprocess.run([*git, "update-ref", "refs/pull/9/head", head], check=True)
    subprocess.run([*git, "checkout", "-q", "main"], check=True)
    pull = {
        "action": "opened",
        "pull_request": {
            "number": 9,
            "head": {"sha": head, "ref": "fork-branch", "repo": {"full_name": "mallory/demo"}},
            "base": {"sha": base_sha, "ref": "main"},
        },
        "repository": {"full_name": "octo/demo"},
    }
    return url, head, str(marker), pull


def test_a_forks_pull_request_is_not_run_and_the_check_run_says_why(service, tmp_path, github_server):
    url, _, marker, pull = fork_pull_request(tmp_path)
    assert marker.endswith("fork-ran-on-the-host")
    register(service.settings, service.session_factory, url)
    response = service.deliver(pull, "d-fork", "pull_request")
    job = service.wait(response.get_json()["job_id"])
    assert job["status"] == "cancelled" and "fork mallory/demo" in job["error"], job["error"]
    assert service.count(Run) == 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(
        r.body.get("status") == "completed" for r in github_server.check_runs()
    ):
        time.sleep(0.1)
    completed = [r for r in github_server.check_runs() if r.body.get("status") == "completed"]
    assert completed and "fork mallory/demo" in completed[-1].body["output"]["summary"]
    assert not Path(marker).exists()


def test_an_allowed_forks_pull_request_runs_the_base_branchs_config(service, tmp_path):
    url, head, marker, pull = fork_pull_request(tmp_path)
    register(service.settings, service.session_factory, url, allow_forks=True)
    response = service.deliver(pull, "d-fork-allowed", "pull_request")
    assert response.status_code == 202, response.get_json()
    job = service.wait(response.get_json()["job_id"])
    assert job["status"] == "done", job["error"]
    # The fork's code at its head, measured the way the base branch says.
    assert job["repository"]["commit"] == head
    assert job["command"] == ["python3", "steady.py"] and job["repeat"] == 1 and job["executor"] == "docker"
    assert not Path(marker).exists()


def test_an_unsigned_body_never_reaches_the_json_parser(front_door):
    # Bodies that break or exhaust a parser: each must be refused on its signature alone,
    # the same 401 a well-formed unsigned body gets (no 400 or 500 that says it was parsed).
    register(front_door.settings, front_door.session_factory, "https://github.com/octo/demo.git", secret=None)
    for body, content_type in (
        (b"not json at all", "application/json"),
        (b"[" * 200_000, "application/json"),  # nesting deeper than the parser's recursion limit
        (b'{"repository": {"full_name": "octo/demo"}' + b" " * 1_000_000, "application/json"),
        (b"payload=%7B%22broken", "application/x-www-form-urlencoded"),
    ):
        headers = {**delivery_headers(body, "d-garbage", secret="not-the-secret"), "Content-Type": content_type}
        response = front_door.client.post("/api/v1/webhooks/github", data=body, headers=headers)
        assert response.status_code == 401, (body[:40], response.status_code, response.get_data(as_text=True)[:200])
    assert front_door.count(WebhookDelivery) == 0


def test_the_per_repository_url_checks_that_repositorys_secret_only(front_door):
    own = register(front_door.settings, front_door.session_factory, "https://github.com/octo/demo.git", secret=None)
    url = "/api/v1/webhooks/github/octo/demo"
    ping = json.dumps({"zen": "hi", "repository": {"full_name": "octo/demo"}}).encode()
    assert front_door.client.post(url, data=ping, headers=delivery_headers(ping, "p1", "ping", own)).status_code == 200
    # The server-wide secret does not sign for a repository registered with its own.
    other = json.dumps({"zen": "hi", "repository": {"full_name": "octo/demo"}, "n": 2}).encode()
    assert front_door.client.post(url, data=other, headers=delivery_headers(other, "p2", "ping")).status_code == 401
    # Its secret does not sign a body naming another repository, at its URL or the shared one.
    elsewhere = json.dumps({"zen": "hi", "repository": {"full_name": "mallory/x"}}).encode()
    for path in (url, "/api/v1/webhooks/github"):
        signed = delivery_headers(elsewhere, "p3", "ping", own)
        assert front_door.client.post(path, data=elsewhere, headers=signed).status_code == 401, path
    assert front_door.count(WebhookDelivery) == 1


def test_the_url_of_an_unregistered_repository_says_so_while_others_are_registered(front_door):
    # Without a server-wide secret: octo/demo is registered, octo/other is not.
    front_door.settings.github_webhook_secret = None
    own = register(front_door.settings, front_door.session_factory, "https://github.com/octo/demo.git", secret=None)
    body = json.dumps({"zen": "hi", "repository": {"full_name": "octo/other"}}).encode()
    response = front_door.client.post(
        "/api/v1/webhooks/github/octo/other", data=body, headers=delivery_headers(body, "p1", "ping", own)
    )
    answer = response.get_json()
    assert response.status_code == 404, answer
    assert answer["error"].startswith("repository octo/other is not registered here: nothing was run")
    assert "`lagtrace repo register octo/other --project PROJECT`" in answer["error"]
    assert "webhooks are off" not in answer["error"]
    assert answer["problems"][0]["field"] == "path"
    assert front_door.count(WebhookDelivery) == 0
