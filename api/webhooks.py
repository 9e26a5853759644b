"""POST /api/v1/webhooks/github: signature first, then one job per delivery."""

from __future__ import annotations

import json
from urllib.parse import parse_qs

from flask import Blueprint, jsonify, request
from sqlalchemy.exc import IntegrityError

from api.errors import BadRequest, error_response
from api.metrics import metrics as api_metrics
from services.context import ctx, db
from services.github import webhooks
from services.models import WebhookDelivery

bp = Blueprint("webhooks", __name__, url_prefix="/api/v1")


@bp.post("/webhooks/github")
@bp.post("/webhooks/github/<owner>/<name>")
def github(owner: str | None = None, name: str | None = None):
    settings, metrics = ctx().settings, api_metrics()
    # GitHub sends at most 25 MB; anything larger is refused before it is read or verified
    # (never more than the app's own limit on request bodies).
    app_limit = request.max_content_length
    request.max_content_length = min(settings.webhook_max_bytes, app_limit or settings.webhook_max_bytes)
    body = request.get_data()  # the raw bytes GitHub signed, before any parsing
    signature = request.headers.get("X-Hub-Signature-256")
    if not signature:
        metrics.webhooks.labels(outcome="bad_signature").inc()
        return error_response(401, "missing or wrong X-Hub-Signature-256: nothing was stored")
    # The per-repository URL names whose secret signs the body; the shared URL tries every
    # known secret. Either way the HMAC is checked on the raw bytes and only a signed body
    # is parsed: an unsigned caller never reaches the JSON parser.
    repository = f"{owner}/{name}" if owner and name else None
    session = db()
    try:
        signer = webhooks.verify_delivery(session, settings, body, signature, repository)
        payload = _payload(body)
        project = webhooks.authenticate_delivery(session, signer, payload, repository)
    except webhooks.UnknownRepository:
        metrics.webhooks.labels(outcome="not_registered").inc()
        raise
    except webhooks.WebhooksOff as exc:
        metrics.webhooks.labels(outcome="not_configured").inc()
        return error_response(503, str(exc))
    except webhooks.BadSignature as exc:
        metrics.webhooks.labels(outcome="bad_signature").inc()
        return error_response(401, str(exc))
    delivery_id = request.headers.get("X-GitHub-Delivery", "").strip()
    event = request.headers.get("X-GitHub-Event", "").strip()
    if not delivery_id or not event or len(delivery_id) > 100 or len(event) > 64:
        raise BadRequest("X-GitHub-Delivery and X-GitHub-Event headers are required")
    try:
        outcome = webhooks.handle_delivery(
            session, settings, delivery_id=delivery_id, event=event, payload=payload, project=project, body=body
        )
        session.commit()
    except webhooks.UnknownRepository:
        metrics.webhooks.labels(outcome="not_registered").inc()
        raise
    except webhooks.ReplayedDelivery:
        metrics.webhooks.labels(outcome="replayed").inc()
        raise
    except IntegrityError:
        # The same delivery arrived twice at once and the other request stored it first.
        session.rollback()
        seen = session.get(WebhookDelivery, delivery_id)
        metrics.webhooks.labels(outcome="duplicate").inc()
        return jsonify(
            {
                "delivery": delivery_id,
                "duplicate": True,
                "job_id": seen.job_id if seen else None,
                "outcome": "duplicate delivery",
            }
        )
    metrics.webhooks.labels(outcome="duplicate" if outcome.duplicate else event).inc()
    started = outcome.job_id is not None and not outcome.duplicate
    response = jsonify(
        {"delivery": delivery_id, "duplicate": outcome.duplicate, "job_id": outcome.job_id, "outcome": outcome.outcome}
    )
    response.status_code = 202 if started else 200
    return response


def _payload(body: bytes) -> object:
    # GitHub sends JSON, or a form with one `payload` field when so configured.
    try:
        if request.mimetype == "application/x-www-form-urlencoded":
            return json.loads(parse_qs(body.decode())["payload"][0])
        return json.loads(body)
    except (ValueError, KeyError, UnicodeDecodeError, RecursionError) as exc:
        raise BadRequest(f"the delivery body is not a JSON payload: {exc}") from None
