"""The API's part of the app: its blueprints, JSON errors and request metrics."""

from __future__ import annotations

import time

from flask import Flask, g, request

from api import artifacts, bisects, errors, findings, health, jobs, openapi, webhooks, workers
from api.metrics import make_metrics, metrics
from services.context import AppContext

# The paths the API answers (in JSON, errors included); every other path is the dashboard's.
API_PATHS = ("/api/", "/healthz", "/readyz", "/metrics")
# Room for the multipart envelope around the largest archive accepted.
MULTIPART_OVERHEAD = 1024 * 1024


def register(app: Flask, context: AppContext) -> None:
    """Add /api/v1 (and /healthz, /readyz, /metrics) to an app made by cli.wsgi.create_app."""
    app.config["MAX_CONTENT_LENGTH"] = context.settings.max_archive_bytes + MULTIPART_OVERHEAD
    app.json.sort_keys = False  # type: ignore[attr-defined]
    context.extensions["metrics"] = make_metrics(context.session_factory)
    for blueprint in (jobs.bp, bisects.bp, findings.bp, artifacts.bp, webhooks.bp, health.bp, workers.bp, openapi.bp):
        app.register_blueprint(blueprint)
    errors.register(app)

    @app.before_request
    def _start_clock() -> None:
        g.started = time.perf_counter()

    @app.after_request
    def _count(response):
        endpoint = request.url_rule.rule if request.url_rule else "unmatched"
        counted = metrics()
        counted.requests.labels(request.method, endpoint, str(response.status_code)).inc()
        counted.latency.labels(endpoint).observe(time.perf_counter() - g.get("started", time.perf_counter()))
        return response
