"""/healthz (the process answers), /readyz (database and queue reachable), /metrics."""

from __future__ import annotations

import re

from flask import Blueprint, Response, jsonify
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from api.metrics import metrics as api_metrics
from services.context import ctx

bp = Blueprint("health", __name__)

# scheme://user:password@host: /readyz is unauthenticated, so no password in its answer.
CREDENTIALS_IN_URL = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]*@")
PASSWORD_PARAMETER = re.compile(r"(?i)(password|passwd|pwd|secret|token)=[^&\s]+")


def redact(text: str) -> str:
    """A connection error as the public may read it: URLs without their credentials."""
    text = CREDENTIALS_IN_URL.sub(lambda m: m.group("scheme") + "***@", text)
    return PASSWORD_PARAMETER.sub(lambda m: m.group(1) + "=***", text)


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
        problems["database"] = redact(f"{type(exc).__name__}: {exc}")
    queue_problem = ctx().dispatcher.problem()
    if queue_problem:
        problems["queue"] = redact(queue_problem)
    response = jsonify({"status": "not ready" if problems else "ready", "problems": problems})
    response.status_code = 503 if problems else 200
    return response


@bp.get("/metrics")
def metrics():
    return Response(generate_latest(api_metrics().registry), mimetype=CONTENT_TYPE_LATEST)
