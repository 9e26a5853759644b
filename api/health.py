"""/healthz (the process answers), /readyz (database and queue reachable, live workers
counted, room on the disk where this process runs the jobs), /metrics."""

from __future__ import annotations

import hmac
import logging

from flask import Blueprint, Response, jsonify, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from api.errors import error_response
from api.metrics import metrics as api_metrics
from services.context import ctx, db
from services.jobs import disk, workers
from services.redact import redact

bp = Blueprint("health", __name__)
log = logging.getLogger("lagtrace.api")


@bp.get("/healthz")
def healthz():
    return jsonify({"status": "ok"})


@bp.get("/readyz")
def readyz():
    # Unauthenticated: the answer names the components and nothing else (no host, port or
    # error text, which map the network behind the API); the reasons go to the log.
    problems: dict[str, str] = {}
    try:
        with ctx().engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:  # any failure means "not ready"
        problems["database"] = f"{type(exc).__name__}: {exc}"
    queue_problem = ctx().dispatcher.problem()
    if queue_problem:
        problems["queue"] = queue_problem
    settings = ctx().settings
    checked = ["database", "queue"]
    if not workers.expects_workers(settings):
        # This process runs the jobs itself: a work directory short of space takes no step
        # (services/jobs/disk.py), as a worker's `lagtrace alive --ready` says for a worker.
        checked.append("disk")
        if (short := disk.short_of_space(settings)) is not None:
            problems["disk"] = short
    for component, problem in problems.items():
        log.warning("not ready: %s: %s", component, redact(problem))
    components = {name: "failed" if name in problems else "ok" for name in checked}
    answer: dict[str, object] = {"status": "not ready" if problems else "ready", "components": components}
    if "database" not in problems and workers.expects_workers(settings):
        # Counted, never a reason to be unready: the API takes jobs while no worker runs
        # (they wait queued, and their page says that no worker is running), and a
        # Kubernetes readiness probe on it must not take the API away for that.
        live = len(workers.live(db(), settings))
        answer["workers"] = {"live": live}
        if not live:
            answer["warning"] = workers.NO_WORKER
    response = jsonify(answer)
    response.status_code = 503 if problems else 200
    return response


@bp.get("/metrics")
def metrics():
    # The counts span every project: only a scraper holding LAGTRACE_METRICS_TOKEN reads them.
    token = ctx().settings.metrics_token
    if token is None:
        return error_response(403, "/metrics is off: set LAGTRACE_METRICS_TOKEN and scrape with it as a Bearer token")
    scheme, _, sent = request.headers.get("Authorization", "").partition(" ")
    expected = token.get_secret_value().encode()
    if scheme.lower() != "bearer" or not hmac.compare_digest(sent.strip().encode(), expected):
        return error_response(401, "missing or wrong Bearer token (LAGTRACE_METRICS_TOKEN)")
    return Response(generate_latest(api_metrics().registry), mimetype=CONTENT_TYPE_LATEST)
