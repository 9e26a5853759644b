"""The dashboard's part of the app: the signed session cookie and its pages."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable

from flask import Flask, Request
from flask.sessions import SecureCookieSession, SecureCookieSessionInterface, SessionMixin
from itsdangerous import BadSignature, URLSafeTimedSerializer
from sqlalchemy.exc import SQLAlchemyError

from services.accounts.secret_key import shared_secret_key
from services.context import AppContext
from web import views

log = logging.getLogger("lagtrace.web")

# A signed-in session's cookie is signed again at most this often, not on every response.
REFRESH_AFTER = dt.timedelta(seconds=60)


class _Session(SecureCookieSession):
    # When the cookie that brought this session was signed (None: no valid cookie).
    signed_at: dt.datetime | None = None


class _SessionInterface(SecureCookieSessionInterface):
    """Flask's signed cookie session, but a session nothing changed sends no new cookie
    until its cookie is REFRESH_AFTER old. Flask signs a permanent session's cookie again
    on every response (its timestamp and expiry slide with each request): serialising,
    compressing and signing it was 3-4 % of the server's CPU on a page. The expiry still
    slides: a session ends session_hours after its cookie was last signed, at most
    REFRESH_AFTER before the last request (never later than before). Sign-in, sign-out
    and the CSRF token modify the session and so still send it at once."""

    session_class = _Session

    def __init__(self, load_secret_key: Callable[[], str] | None = None) -> None:
        self._load_secret_key = load_secret_key

    def load_secret_key(self, app: Flask) -> None:
        """The key kept in the database, if it can be read now. When it cannot (a database
        not yet migrated: tests/chart/test_chart.py builds an app on an empty one; or one
        that is down), the app still starts, and the next request tries again."""
        if app.secret_key or self._load_secret_key is None:
            return
        try:
            app.secret_key = self._load_secret_key()
        except SQLAlchemyError as exc:
            log.warning("the sign-in key could not be read from the database yet: %s", type(exc).__name__)

    def get_signing_serializer(self, app: Flask) -> URLSafeTimedSerializer | None:
        # Without the key this request has no session (Flask's null session): an API call
        # with a token needs none, and a page's own database access answers 503 in an
        # outage, where an error here would be a bare 500 (Flask opens the session before
        # any error handler can see it).
        self.load_secret_key(app)
        return super().get_signing_serializer(app)

    def open_session(self, app: Flask, request: Request) -> _Session | None:
        serializer = self.get_signing_serializer(app)
        if serializer is None:
            return None
        value = request.cookies.get(self.get_cookie_name(app))
        if not value:
            return self.session_class()
        max_age = int(app.permanent_session_lifetime.total_seconds())
        try:
            data, signed_at = serializer.loads(value, max_age=max_age, return_timestamp=True)
        except BadSignature:
            return self.session_class()
        session = self.session_class(data)
        session.signed_at = signed_at
        return session

    def should_set_cookie(self, app: Flask, session: SessionMixin) -> bool:
        if session.modified:
            return True
        if not (session.permanent and app.config["SESSION_REFRESH_EACH_REQUEST"]):
            return False
        signed_at = getattr(session, "signed_at", None)
        return signed_at is None or dt.datetime.now(dt.UTC) - signed_at >= REFRESH_AFTER


def register(app: Flask, context: AppContext) -> None:
    """Add the dashboard at / to an app made by cli.wsgi.create_app."""
    settings = context.settings
    load_secret_key: Callable[[], str] | None = None
    if settings.secret_key is None:
        # One key for every serving process: a key of each process's own sent every
        # sign-in whose next request reached another process back to the sign-in form
        # (tests/cli/test_serve_processes.py signs in 8 times through 2 processes).
        def load_secret_key() -> str:
            with context.session_factory() as session:
                return shared_secret_key(session)

        log.info("LAGTRACE_SECRET_KEY is not set: sign-ins are signed with the key kept in the database")
    else:
        app.secret_key = settings.secret_key.get_secret_value()
    app.config.update(
        SESSION_COOKIE_NAME="lagtrace_session",
        SESSION_COOKIE_SECURE=settings.cookie_secure,
        SESSION_COOKIE_HTTPONLY=True,
        # Lax, not Strict: a link to /jobs/<id> from a GitHub check run must arrive signed in.
        # Every state change is a POST, which Lax keeps off cross-site requests (and CSRF
        # tokens guard as well).
        SESSION_COOKIE_SAMESITE="Lax",
        PERMANENT_SESSION_LIFETIME=dt.timedelta(hours=settings.session_hours),
    )
    interface = _SessionInterface(load_secret_key)
    interface.load_secret_key(app)  # at start when it can: requests then never wait on it
    app.session_interface = interface
    app.jinja_env.autoescape = True
    app.register_blueprint(views.bp)
