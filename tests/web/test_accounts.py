"""Sign-in, cookies, CSRF on every form, per-project access, and `lagtrace user create`."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

import pytest
from sqlalchemy import select

from services.accounts.users import SignInFailed, check_password, create_user, hash_password, sign_in
from services.errors import BadInput
from services.models import User
from tests.conftest import REPO
from tests.web.conftest import PASSWORD
from tests.web.sample_data import store_handoff_job
from web import app as web_app


def test_passwords_are_salted_hashes_that_check():
    first, second = hash_password("s3cret-pass"), hash_password("s3cret-pass")
    assert first != second and "s3cret" not in first  # salted, never the password
    assert check_password(first, "s3cret-pass")
    assert not check_password(first, "s3cret-pasS")
    assert not check_password("garbage", "s3cret-pass")


def test_accounts_refuse_short_passwords_and_duplicates(dashboard):
    with dashboard.session_factory() as session:
        with pytest.raises(BadInput, match="at least 8"):
            create_user(session, "ann", "short", projects=["demo"])
        create_user(session, "ann", PASSWORD, projects=["demo"])
        with pytest.raises(BadInput, match="exists already"):
            create_user(session, "ann", PASSWORD, projects=["demo"])
        with pytest.raises(SignInFailed):
            sign_in(session, "ann", "wrong password")
        with pytest.raises(SignInFailed):
            sign_in(session, "nobody", PASSWORD)
        assert sign_in(session, " ann ", PASSWORD).username == "ann"


def test_pages_need_a_sign_in_and_come_back_after_it(dashboard):
    dashboard.add_user("ann", ["demo"])
    response = dashboard.client.get("/jobs?status=done")
    assert response.status_code == 302 and response.headers["Location"].startswith("/sign-in?next=")
    response = dashboard.client.post(
        "/sign-in",
        data={"username": "ann", "password": PASSWORD, "csrf_token": dashboard.csrf(), "next": "/jobs?status=done"},
    )
    assert response.status_code == 302 and response.headers["Location"] == "/jobs?status=done"


def test_a_wrong_password_is_refused_without_saying_which_part(dashboard):
    dashboard.add_user("ann", ["demo"])
    response = dashboard.sign_in("ann", "not the password")
    assert response.status_code == 401
    assert "unknown user or wrong password" in response.get_data(as_text=True)
    assert dashboard.client.get("/").status_code == 302  # still signed out


def test_the_sign_in_cookie_is_secure_httponly_and_samesite(dashboard):
    dashboard.add_user("ann", ["demo"])
    response = dashboard.sign_in("ann")
    assert response.status_code == 302
    cookie = next(h for h in response.headers.getlist("Set-Cookie") if h.startswith("lagtrace_session="))
    attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")}
    assert {"secure", "httponly", "samesite"} <= attributes
    assert "SameSite=Lax" in cookie


def _session_cookie(response) -> str | None:
    return next((h for h in response.headers.getlist("Set-Cookie") if h.startswith("lagtrace_session=")), None)


def test_an_unchanged_session_is_signed_again_only_once_its_cookie_has_aged(dashboard, monkeypatch):
    dashboard.add_user("ann", ["demo"])
    assert _session_cookie(dashboard.sign_in("ann")) is not None
    # A page that changes nothing in the session sends no new cookie (signing it cost every page).
    response = dashboard.client.get("/")
    assert response.status_code == 200 and _session_cookie(response) is None
    # Once the cookie is REFRESH_AFTER old it is signed again: the expiry still slides with use.
    monkeypatch.setattr(web_app, "REFRESH_AFTER", dt.timedelta(0))
    response = dashboard.client.get("/")
    cookie = _session_cookie(response)
    assert response.status_code == 200 and cookie is not None
    assert "Expires=" in cookie and "HttpOnly" in cookie
    # Signing out changes the session: its cookie goes at once.
    monkeypatch.setattr(web_app, "REFRESH_AFTER", dt.timedelta(hours=1))
    response = dashboard.post("/sign-out", {})
    assert response.status_code == 302 and _session_cookie(response) is not None
    assert dashboard.client.get("/").status_code == 302


@pytest.mark.parametrize("token", [None, "forged-token"])
def test_every_form_needs_the_sessions_csrf_token(dashboard, token):
    dashboard.add_user("ann", ["demo"])
    with dashboard.session_factory() as session:
        job = store_handoff_job(session, dashboard.settings)
        finding_id = job.findings[0].id
        session.commit()
    assert dashboard.sign_in("ann").status_code == 302
    data = {"status": "muted"} | ({"csrf_token": token} if token else {})
    for path in (
        f"/findings/{finding_id}/triage",
        f"/jobs/{job.id}/rerun",
        f"/jobs/{job.id}/cancel",
        "/jobs/new",
        "/sign-out",
    ):
        response = dashboard.client.post(path, data=data)
        assert response.status_code == 400, path
        assert "CSRF" in response.get_data(as_text=True)
    # The sign-in form too: a forged sign-in (login CSRF) is refused before the password is checked.
    assert dashboard.client.post("/sign-in", data={"username": "ann", "password": PASSWORD}).status_code == 400
    with dashboard.session_factory() as session:
        assert session.get(type(job.findings[0]), finding_id).status.value == "new"


def test_a_user_sees_only_their_projects(dashboard):
    dashboard.add_user("ann", ["demo"])
    dashboard.add_user("root", [], admin=True)
    with dashboard.session_factory() as session:
        mine = store_handoff_job(session, dashboard.settings, project="demo")
        theirs = store_handoff_job(session, dashboard.settings, project="secret")
        ids = {
            "mine": mine.id,
            "theirs": theirs.id,
            "their_finding": theirs.findings[0].id,
            "their_evidence": theirs.evidence[0].id,
        }
        key = next(a["key"] for e in theirs.evidence for a in e.artifacts)
        session.commit()
    dashboard.sign_in("ann")
    assert dashboard.client.get(f"/jobs/{ids['mine']}").status_code == 200
    for path in (
        f"/jobs/{ids['theirs']}",
        f"/findings/{ids['their_finding']}",
        f"/evidence/{ids['their_evidence']}",
        f"/artifacts/{key}",
        f"/jobs/{ids['theirs']}/progress",
        f"/jobs/{ids['theirs']}/test",
    ):
        assert dashboard.client.get(path).status_code == 404, path
    inbox, jobs = dashboard.page("/"), dashboard.page("/jobs")
    assert "secret" not in inbox and f"#{ids['theirs']}" not in jobs and f"#{ids['mine']}" in jobs
    dashboard.client.post("/sign-out", data={"csrf_token": dashboard.csrf("/")})
    dashboard.sign_in("root")
    assert dashboard.client.get(f"/jobs/{ids['theirs']}").status_code == 200


def test_next_never_leaves_the_site(dashboard):
    dashboard.add_user("ann", ["demo"])
    for target in ("https://evil.example/", "//evil.example/x", "/\\evil.example"):
        response = dashboard.client.post(
            "/sign-in", data={"username": "ann", "password": PASSWORD, "csrf_token": dashboard.csrf(), "next": target}
        )
        assert response.headers["Location"] == "/", target


def test_user_create_cli_stores_a_hashed_password(dashboard):
    env = {"LAGTRACE_DATABASE_URL": dashboard.settings.database_url, "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "user", "create", "bob", "--project", "demo", "--password-stdin"],
        input=PASSWORD + "\n",
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "user bob created with access to demo" in done.stderr
    with dashboard.session_factory() as session:
        bob = session.scalar(select(User).where(User.username == "bob"))
        assert bob.password_hash.startswith("scrypt$") and [p.name for p in bob.projects] == ["demo"]
    assert dashboard.sign_in("bob").status_code == 302
    again = subprocess.run(
        [sys.executable, "-m", "cli.main", "user", "create", "carl", "--password-stdin"],
        input=PASSWORD + "\n",
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 2 and "--project" in again.stderr
