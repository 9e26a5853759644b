"""Abuse of the front door: oversized bodies, the sign-in redirect, password guessing,
submission floods, credentials in /readyz, old and revoked tokens, and jobs that ask for
images, repetitions or timeouts the server does not give."""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import sys
from urllib.parse import urljoin, urlsplit

import pytest
from sqlalchemy import select

from services.accounts.ratelimit import client_key
from services.models import ApiToken, Job, JobSource, Project
from tests.conftest import REPO
from tests.security.conftest import PASSWORD
from tests.service_support import SECRET, delivery_headers

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
JOB = {
    "repository": {"url": "https://example.com/octo/demo.git"},
    "command": ["python3", "-c", "pass"],
    "configs": ["cpuset=0"],
    "repeat": 1,
}


def test_an_oversized_body_is_413_before_it_is_read(make_service):
    service = make_service(run_jobs=False, max_archive_bytes=1024 * 1024)
    limit = service.client.application.config["MAX_CONTENT_LENGTH"]
    body = b"x" * (limit + 1)
    for path, headers in (
        ("/api/v1/jobs", {**service.auth, "Content-Type": "application/json"}),
        ("/api/v1/webhooks/github", delivery_headers(body, "d-big")),
    ):
        response = service.client.post(path, data=body, headers=headers)
        assert response.status_code == 413, (path, response.status_code)
        # The limit that applied: the archive's (1 MiB here) for the webhook too, under GitHub's 25 MB.
        assert "1 MiB limit (LAGTRACE_MAX_ARCHIVE_BYTES, 1,048,576 bytes" in response.get_json()["error"]
    assert service.count(Job) == 0


def sign_in(client, username: str, password: str, next_url: str | None = None, headers: dict | None = None):
    page = client.get("/sign-in" + (f"?next={next_url}" if next_url is not None else ""), headers=headers)
    token = CSRF.search(page.get_data(as_text=True)).group(1)
    data = {"username": username, "password": password, "csrf_token": token}
    if next_url is not None:
        data["next"] = next_url
    return client.post("/sign-in", data=data, headers=headers)


def test_behind_a_proxy_one_clients_bad_passwords_lock_only_that_client(make_service):
    # The chart's Ingress is one trusted proxy: it appends the client's address to
    # X-Forwarded-For, and every request reaches the service from the ingress's address.
    service = make_service(run_jobs=False, trusted_proxies=1)
    service.add_user("ann", ["octo/demo"])
    limit = service.settings.sign_in_failures_per_minute
    mallory = {"X-Forwarded-For": "203.0.113.5"}
    statuses = [sign_in(service.client, "ann", f"guess-{i}", headers=mallory).status_code for i in range(limit + 2)]
    assert statuses == [401] * limit + [429] * 2, statuses
    assert sign_in(service.client, "ann", PASSWORD, headers=mallory).status_code == 429
    # ann, from her own address through the same ingress, is not locked out.
    assert sign_in(service.client, "ann", PASSWORD, headers={"X-Forwarded-For": "198.51.100.7"}).status_code == 302
    # A client naming another address before the ingress's entry gains nothing: only the
    # last hop, the one the ingress added, is believed.
    spoofed = {"X-Forwarded-For": "198.51.100.7, 203.0.113.5"}
    assert sign_in(service.client, "ann", "guess", headers=spoofed).status_code == 429


def test_without_a_trusted_proxy_forwarded_addresses_are_ignored(front_door):
    assert front_door.settings.trusted_proxies == 0  # the shipped default
    front_door.add_user("ann", ["octo/demo"])
    limit = front_door.settings.sign_in_failures_per_minute
    statuses = [
        sign_in(front_door.client, "ann", "guess", headers={"X-Forwarded-For": f"198.51.100.{i}"}).status_code
        for i in range(limit + 1)
    ]
    assert statuses == [401] * limit + [429], statuses  # a new made-up address each time changed nothing


@pytest.mark.parametrize(
    "target",
    [
        "https://evil.example/",
        "//evil.example/",
        "/\\evil.example/",
        "/\t/evil.example/",
        "/\n/evil.example/",
        "\\\\evil.example",
        "/%09/evil.example",
        "javascript:alert(1)",
        " //evil.example",
    ],
)
def test_the_redirect_after_sign_in_stays_on_the_site(front_door, target):
    front_door.add_user("ann", ["octo/demo"])
    response = sign_in(front_door.client, "ann", PASSWORD, target)
    assert response.status_code == 302
    location = response.headers["Location"]
    # Resolved as a browser does: tabs and newlines dropped, a backslash read as a slash.
    cleaned = location.replace("\\", "/").replace("\t", "").replace("\n", "")
    assert urlsplit(urljoin("http://lagtrace.test/sign-in", cleaned)).netloc == "lagtrace.test", location


def test_a_local_next_is_kept(front_door):
    front_door.add_user("ann", ["octo/demo"])
    assert sign_in(front_door.client, "ann", PASSWORD, "/jobs?status=done").headers["Location"] == "/jobs?status=done"


def test_guessing_passwords_is_stopped_and_the_right_one_waits_too(front_door):
    front_door.add_user("ann", ["octo/demo"])
    limit = front_door.settings.sign_in_failures_per_minute
    statuses = [sign_in(front_door.client, "ann", f"guess-{i}").status_code for i in range(limit + 3)]
    assert statuses[:limit] == [401] * limit and set(statuses[limit:]) == {429}, statuses
    blocked = sign_in(front_door.client, "ann", PASSWORD)
    assert blocked.status_code == 429 and int(blocked.headers["Retry-After"]) > 0
    # Spraying guesses over other names from the same client is stopped at the client's
    # own limit, and then every name is refused to it.
    per_client = front_door.settings.sign_in_client_failures_per_minute
    sprayed = [sign_in(front_door.client, f"name-{i}", "guess").status_code for i in range(per_client)]
    assert sprayed == [401] * (per_client - limit) + [429] * limit, sprayed
    front_door.add_user("bob", ["octo/demo"])
    assert sign_in(front_door.client, "bob", PASSWORD).status_code == 429


def test_a_token_flooding_submissions_gets_429(make_service):
    service = make_service(run_jobs=False, submissions_per_minute=3)
    statuses = [service.submit(JOB).status_code for _ in range(5)]
    assert statuses == [201, 201, 201, 429, 429], statuses
    other = service.new_token("octo/demo")  # the limit is per token
    assert service.submit(JOB, token=other).status_code == 201


def test_readyz_names_the_failed_components_and_nothing_about_them(front_door, caplog):
    from sqlalchemy import create_engine

    from worker import CeleryDispatcher, make_celery

    settings = front_door.settings.model_copy(update={"broker_url": "redis://lagtrace:hunter2-pw@127.0.0.1:1/0"})
    extension = front_door.client.application.extensions["lagtrace"]
    extension.settings = settings  # jobs go to workers: the server's own disk is not a component
    extension.dispatcher = CeleryDispatcher(make_celery(settings))
    extension.engine = create_engine("postgresql+psycopg://lagtrace:db-pw-77@127.0.0.2:1/lagtrace")
    with caplog.at_level("WARNING", logger="lagtrace.api"):
        response = front_door.client.get("/readyz")
    assert response.status_code == 503
    assert response.get_json() == {"status": "not ready", "components": {"database": "failed", "queue": "failed"}}
    # The operator still learns why, from the log, without the passwords.
    logged = caplog.text
    assert "127.0.0.1:1" in logged and "127.0.0.2" in logged
    assert "hunter2-pw" not in logged and "db-pw-77" not in logged, logged


def test_metrics_need_the_scrapers_token(make_service):
    closed = make_service(run_jobs=False)
    assert closed.client.get("/metrics").status_code == 403  # no token configured: off
    service = make_service(run_jobs=False, metrics_token="scrape-token-0123456789")
    for headers in ({}, {"Authorization": "Bearer wrong"}, service.auth, {"Authorization": "scrape-token-0123456789"}):
        response = service.client.get("/metrics", headers=headers)
        assert response.status_code == 401 and "lagtrace_" not in response.get_data(as_text=True), headers
    scraped = service.client.get("/metrics", headers={"Authorization": "Bearer scrape-token-0123456789"})
    assert scraped.status_code == 200 and "lagtrace_jobs" in scraped.get_data(as_text=True)


def test_expired_and_revoked_tokens_are_refused(front_door):
    token = front_door.new_token("octo/demo")
    assert front_door.client.get("/api/v1/jobs", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    with front_door.session_factory() as session:
        stored = session.scalar(select(ApiToken).where(ApiToken.prefix == token[:10]))
        assert stored.expires_at is not None  # tokens expire by default
        stored.expires_at = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
        session.commit()
    expired = front_door.client.get("/api/v1/jobs", headers={"Authorization": f"Bearer {token}"})
    assert expired.status_code == 401 and "expired" in expired.get_json()["error"]

    # `lagtrace token revoke PREFIX`, as an operator runs it.
    env = {**os.environ, "LAGTRACE_DATABASE_URL": front_door.settings.database_url}
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "token", "revoke", front_door.token[:10]],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    revoked = front_door.client.get("/api/v1/jobs", headers=front_door.auth)
    assert revoked.status_code == 401 and "revoked" in revoked.get_json()["error"]


def test_images_outside_the_projects_allowlist_are_refused(front_door):
    for image in ("lagtrace-deps:0123456789abcdef", "debian:12", "attacker/escape:latest"):
        response = front_door.submit({**JOB, "image": image})
        assert response.status_code == 422 and "image" in response.get_json()["error"], image
    with front_door.session_factory() as session:
        project = session.scalar(select(Project).where(Project.name == "octo/demo"))
        project.allowed_images = ["debian:12"]
        session.commit()
    assert front_door.submit({**JOB, "image": "debian:12"}).status_code == 201
    assert front_door.submit({**JOB, "image": "lagtrace-deps:0123456789abcdef"}).status_code == 422


def test_repeat_timeout_and_stall_time_are_capped_and_a_timeout_is_always_set(front_door):
    settings = front_door.settings
    for field, value in (
        ("repeat", settings.max_repeat + 1),
        ("timeout_s", settings.run_timeout_max_s + 1),
        ("stall_after_s", settings.max_stall_after_s + 1),
    ):
        response = front_door.submit({**JOB, field: value})
        assert response.status_code == 422 and field in response.get_json()["error"], field
    job = front_door.submit(JOB).get_json()
    assert job["timeout_s"] == settings.run_timeout_s
    with front_door.session_factory() as session:
        assert session.get(JobSource, job["id"]) is not None


def test_webhook_secret_is_not_needed_to_learn_nothing(front_door):
    # Unsigned: 401 whether or not the repository is registered (no registration oracle).
    body = b'{"repository": {"full_name": "octo/demo"}}'
    headers = {k: v for k, v in delivery_headers(body, "d-probe").items() if k != "X-Hub-Signature-256"}
    assert front_door.client.post("/api/v1/webhooks/github", data=body, headers=headers).status_code == 401
    wrong = delivery_headers(body, "d-probe", secret=SECRET + "x")
    assert front_door.client.post("/api/v1/webhooks/github", data=body, headers=wrong).status_code == 401


def test_a_copied_session_cookie_stops_working_at_sign_out(front_door):
    front_door.add_user("ann", ["octo/demo"])
    assert sign_in(front_door.client, "ann", PASSWORD).status_code == 302
    stolen = front_door.client.get_cookie("lagtrace_session")
    assert stolen is not None
    thief = front_door.client.application.test_client()
    thief.set_cookie("lagtrace_session", stolen.value, domain=stolen.domain)
    assert thief.get("/").status_code == 200  # the copy works while ann is signed in
    page = front_door.client.get("/").get_data(as_text=True)
    signed_out = front_door.client.post("/sign-out", data={"csrf_token": CSRF.search(page).group(1)})
    assert signed_out.status_code == 302
    # The copy, replayed after ann signed out, is a stranger's: off to sign in.
    replayed = thief.get("/")
    assert replayed.status_code == 302 and replayed.headers["Location"].startswith("/sign-in"), replayed.status_code
    # ann can sign in again, and the new session works.
    assert sign_in(front_door.client, "ann", PASSWORD).status_code == 302
    assert front_door.client.get("/").status_code == 200


def test_dashboard_reruns_spend_the_same_submission_allowance(make_service):
    service = make_service(run_jobs=False, submissions_per_minute=3)
    parent = service.submit(JOB).get_json()["id"]  # the API token's allowance, not ann's
    service.add_user("ann", ["octo/demo"])
    assert sign_in(service.client, "ann", PASSWORD).status_code == 302
    page = service.client.get(f"/jobs/{parent}").get_data(as_text=True)
    token = CSRF.search(page).group(1)
    statuses = [
        service.client.post(f"/jobs/{parent}/rerun", data={"csrf_token": token, "config": ["cpuset=0"]}).status_code
        for _ in range(5)
    ]
    assert statuses == [302, 302, 302, 429, 429], statuses
    refused = service.client.post(f"/jobs/{parent}/rerun", data={"csrf_token": token, "config": ["cpuset=0"]})
    assert int(refused.headers["Retry-After"]) > 0
    assert service.count(Job) == 1 + 3


def test_sign_in_attempts_under_made_up_names_do_not_grow_the_limiters_table(front_door):
    # Once this address is blocked, each request under a new name is refused cheaply (no
    # password check), and must leave nothing behind either.
    limit = front_door.settings.sign_in_client_failures_per_minute
    page = front_door.client.get("/sign-in").get_data(as_text=True)
    token = CSRF.search(page).group(1)
    statuses = [
        front_door.client.post(
            "/sign-in", data={"username": f"nobody-{i}", "password": "x" * 12, "csrf_token": token}
        ).status_code
        for i in range(limit + 2000)
    ]
    assert statuses[:limit] == [401] * limit and set(statuses[limit:]) == {429}
    shared = front_door.client.application.extensions["lagtrace"]
    assert len(shared.sign_in_failures._events) == limit  # the failed names, each with this client
    assert len(shared.sign_in_client_failures._events) == 1  # the client


def test_an_unreachable_rate_limit_store_is_a_503_not_a_free_pass(make_service):
    service = make_service(run_jobs=False, rate_limit_storage_url="redis://127.0.0.1:1/0")
    response = service.submit(JOB)
    assert response.status_code == 503, response.get_json()
    assert "rate limits' store is unavailable" in response.get_json()["error"]
    assert service.count(Job) == 0


def test_an_ipv6_client_is_limited_by_its_64_not_by_each_address(make_service):
    # A host holds a whole /64 and may take a new address in it for every guess.
    service = make_service(run_jobs=False, trusted_proxies=1)
    service.add_user("ann", ["octo/demo"])
    limit = service.settings.sign_in_failures_per_minute
    statuses = [
        sign_in(
            service.client, "ann", f"guess-{i}", headers={"X-Forwarded-For": f"2001:db8:1:2::{i + 1:x}"}
        ).status_code
        for i in range(limit + 2)
    ]
    assert statuses == [401] * limit + [429] * 2, statuses
    # Another /64 is another client; the same /64 in its IPv4-mapped or long form is not.
    assert sign_in(service.client, "ann", PASSWORD, headers={"X-Forwarded-For": "2001:db8:1:3::1"}).status_code == 302
    same = {"X-Forwarded-For": "2001:0db8:0001:0002:ffff:0:0:1"}
    assert sign_in(service.client, "ann", PASSWORD, headers=same).status_code == 429
    assert client_key("::ffff:203.0.113.5") == "203.0.113.5" and client_key("203.0.113.5") == "203.0.113.5"
    assert client_key("2001:db8:1:2:aaaa::1") == "2001:db8:1:2::/64" and client_key(None) == "unknown"
