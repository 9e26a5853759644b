"""The one app factory: the API (/api/v1) and the dashboard (/) over one shared context.

api/ and web/ are siblings that know nothing of each other; each adds its part to the
app. The request scope they share (settings, dispatcher, one session per request) is
opened and closed here, around every request.
"""

from __future__ import annotations

from flask import Flask, g
from sqlalchemy import Engine
from werkzeug.middleware.proxy_fix import ProxyFix

import api
import web
from services import context
from services.context import AppContext
from services.jobs.dispatch import Dispatcher
from services.settings import Settings


def create_app(settings: Settings, dispatcher: Dispatcher, engine: Engine | None = None) -> Flask:
    """A WSGI app; jobs go to ``dispatcher`` (Celery, or `lagtrace serve`'s own thread)."""
    app = Flask("lagtrace", static_folder=None)
    if settings.trusted_proxies:
        # The client's address (rate limits, sign-in lockout) and scheme are what the
        # nearest trusted proxy saw; X-Forwarded-* beyond that many hops are the client's
        # own words and ignored. https://werkzeug.palletsprojects.com/en/stable/middleware/proxy_fix/
        hops = settings.trusted_proxies
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=hops, x_proto=hops)  # type: ignore[method-assign]
    shared = AppContext.make(settings, dispatcher, engine)
    app.extensions["lagtrace"] = shared

    # First of all before_request functions (those of the blueprints run after the app's).
    @app.before_request
    def _open_scope() -> None:
        g.lagtrace_scope = context.enter(shared)

    @app.teardown_request
    def _close_scope(_exc: BaseException | None = None) -> None:
        token = g.pop("lagtrace_scope", None)
        if token is not None:
            context.leave(token)

    api.register(app, shared)
    web.register(app, shared)
    return app
