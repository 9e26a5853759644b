"""Who is signed in, CSRF tokens for every form, and which projects the user may see."""

from __future__ import annotations

import hmac
import secrets
from urllib.parse import urlsplit

from flask import abort, g, redirect, request, session, url_for
from flask.sessions import NullSession
from werkzeug.exceptions import ServiceUnavailable

from services.accounts.users import session_is_current, user_with_projects, visible_projects
from services.context import db
from services.errors import NotFound
from services.models import Finding, Job, Project, User

CSRF_FIELD = "csrf_token"
SESSION_EPOCH = "epoch"
# Reachable without signing in: the sign-in page itself and the stylesheet/script.
PUBLIC_ENDPOINTS = {"web.sign_in", "web.static"}


def csrf_token() -> str:
    """This session's token, made on first use; every form carries it in a hidden field."""
    if CSRF_FIELD not in session:
        session[CSRF_FIELD] = secrets.token_urlsafe(32)
    return session[CSRF_FIELD]


def check_csrf() -> None:
    """Reject a state-changing request whose form token is not the session's.

    Checked for every non-GET request of the dashboard, before the view runs, so no
    form can forget it (the sign-in form included: that stops login CSRF).
    """
    if request.method in ("GET", "HEAD", "OPTIONS"):
        return
    sent = request.form.get(CSRF_FIELD, "")
    expected = session.get(CSRF_FIELD, "")
    if not expected or not hmac.compare_digest(sent.encode(), expected.encode()):
        abort(400, description="the form's CSRF token is missing or stale: reload the page and submit again")


def load_user():
    """Before every dashboard request: CSRF, then the signed-in user (or off to sign in)."""
    if isinstance(session._get_current_object(), NullSession):  # type: ignore[attr-defined]
        # No signing key: it is kept in the database (web/app.py), which did not answer.
        # Without a session there is no CSRF token and no sign-in: the outage's 503, as
        # the API answers it, rather than a 500 from the form's token.
        raise ServiceUnavailable(
            "the database is unavailable: signing in needs it; try again in a minute", retry_after=30
        )
    check_csrf()
    user = identify()
    if user is None and request.endpoint not in PUBLIC_ENDPOINTS:
        return redirect(url_for("web.sign_in", next=request.full_path if request.query_string else request.path))
    return None


def identify() -> User | None:
    """The signed-in user (g.user, and g.projects when there is one), or None."""
    user_id = session.get("user_id")
    # The projects the user may see come with the user, in the same query (see projects()).
    user, visible = user_with_projects(db(), user_id) if user_id is not None else (None, [])
    if user is not None and not session_is_current(user, session.get(SESSION_EPOCH)):
        # A cookie from before a sign-out: the browser may still hold it, or someone copied it.
        session.clear()
        user = None
    g.user = user
    if user is not None:
        g.projects = visible
    return user


def start_session(user: User) -> None:
    # A fresh session (and CSRF token) on sign-in, so a token planted before it is useless.
    session.clear()
    session.permanent = True
    session["user_id"] = user.id
    session[SESSION_EPOCH] = user.session_epoch or 0
    csrf_token()


def projects() -> list[Project]:
    """The projects the user may see, by name: read once a request, with the user
    (load_user; the filters list them and every query is narrowed to their ids)."""
    if "projects" not in g:
        g.projects = visible_projects(db(), g.user)
    return g.projects


def project_ids() -> list[int]:
    return [project.id for project in projects()]


def visible_job(job_id: int) -> Job:
    job = db().get(Job, job_id)
    if job is None or job.project_id not in project_ids():
        raise NotFound(f"job {job_id} does not exist or is in a project you cannot see")
    return job


def visible_finding(finding_id: int) -> Finding:
    finding = db().get(Finding, finding_id)
    if finding is None or finding.job.project_id not in project_ids():
        raise NotFound(f"finding {finding_id} does not exist or is in a project you cannot see")
    return finding


def safe_next(target: str | None) -> str:
    """Only a path on this site: ?next= must not send a signed-in user to another one.

    Browsers drop tabs and newlines from URLs and read a backslash as a slash, so
    `/\t/evil.example` and `/\\evil.example` are other sites too: any control character,
    whitespace or backslash is refused, and the rest must parse with no scheme and no host.
    """
    if (
        target
        and target.startswith("/")
        and not target.startswith("//")
        and not any(char.isspace() or ord(char) < 32 or ord(char) == 127 or char == "\\" for char in target)
    ):
        parts = urlsplit(target)
        if not parts.scheme and not parts.netloc:
            return target
    return url_for("web.inbox")
