"""The API application factory."""

from __future__ import annotations

import time

from flask import Flask, g, request
from sqlalchemy import Engine

from api import artifacts, errors, findings, health, jobs, openapi, webhooks
from api.context import ApiContext, close_db, ctx
from api.metrics import make_metrics
from services.accounts.ratelimit import SlidingWindow
from services.db import make_engine, make_session_factory
from services.jobs.dispatch import Dispatcher
from services.settings import Settings

# Room for the multipart envelope around the largest archive accepted.
MULTIPART_OVERHEAD = 1024 * 1024


def create_app(settings: Settings, dispatcher: Dispatcher, engine: Engine | None = None) -> Flask:
    """A WSGI app; jobs go to ``dispatcher`` (Celery, or `lagtrace serve`'s own thread)."""
    app = Flask("lagtrace.api", static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = settings.max_archive_bytes + MULTIPART_OVERHEAD
    app.json.sort_keys = False
    engine = engine or make_engine(settings)
    session_factory = make_session_factory(engine)
    app.extensions["lagtrace"] = ApiContext(
        settings,
        dispatcher,
        engine,
        session_factory,
        make_metrics(session_factory),
        submissions=SlidingWindow(settings.submissions_per_minute),
        sign_in_failures=SlidingWindow(settings.sign_in_failures_per_minute),
    )
    for blueprint in (jobs.bp, findings.bp, artifacts.bp, webhooks.bp, health.bp, openapi.bp):
        app.register_blueprint(blueprint)
    errors.register(app)
    app.teardown_appcontext(close_db)

    @app.before_request
    def _start_clock():
        g.started = time.perf_counter()

    @app.after_request
    def _count(response):
        endpoint = request.url_rule.rule if request.url_rule else "unmatched"
        metrics = ctx().metrics
        metrics.requests.labels(request.method, endpoint, str(response.status_code)).inc()
        metrics.latency.labels(endpoint).observe(time.perf_counter() - g.get("started", time.perf_counter()))
        return response

    return app
