"""The dashboard's part of the app: the signed session cookie and its pages."""

from __future__ import annotations

import datetime as dt
import logging
import secrets

from flask import Flask

from services.context import AppContext
from web import views

log = logging.getLogger("lagtrace.web")


def register(app: Flask, context: AppContext) -> None:
    """Add the dashboard at / to an app made by cli.wsgi.create_app."""
    settings = context.settings
    if settings.secret_key is None:
        log.warning("LAGTRACE_SECRET_KEY is not set: sign-ins last until this process exits")
        app.secret_key = secrets.token_bytes(32)
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
    app.jinja_env.autoescape = True
    app.register_blueprint(views.bp)
