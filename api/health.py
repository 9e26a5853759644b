"""/healthz (the process answers), /readyz (database and queue reachable), /metrics."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from api.metrics import metrics as api_metrics
from services.context import ctx

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz():
    return jsonify({"status": "ok"})


@bp.get("/readyz")
def readyz():
    problems = {}
    try:
        with ctx().engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:  # any failure means "not ready"; say which
        problems["database"] = f"{type(exc).__name__}: {exc}"
    queue_problem = ctx().dispatcher.problem()
    if queue_problem:
        problems["queue"] = queue_problem
    response = jsonify({"status": "not ready" if problems else "ready", "problems": problems})
    response.status_code = 503 if problems else 200
    return response


@bp.get("/metrics")
def metrics():
    return Response(generate_latest(api_metrics().registry), mimetype=CONTENT_TYPE_LATEST)
