"""Mounting the dashboard into the API's Flask app: one process serves both."""

from __future__ import annotations

import datetime as dt
import logging
import secrets

from flask import Flask
from sqlalchemy import Engine

from api import create_app
from api.context import ctx
from services.jobs.dispatch import Dispatcher
from services.settings import Settings
from web import views

log = logging.getLogger("lagtrace.web")


def register(app: Flask) -> None:
    """Add the dashboard to an app made by ``api.create_app`` (it reuses its per-request session)."""
    settings = ctx_settings(app)
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


def ctx_settings(app: Flask) -> Settings:
    with app.app_context():
        return ctx().settings


def create_combined_app(settings: Settings, dispatcher: Dispatcher, engine: Engine | None = None) -> Flask:
    """The API under /api/v1 and the dashboard at /, sharing engine, dispatcher and errors."""
    app = create_app(settings, dispatcher, engine)
    register(app)
    return app
