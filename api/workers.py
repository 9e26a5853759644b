"""/api/v1/workers: the workers heard from, live or not, with their last heartbeat."""

from __future__ import annotations

from flask import Blueprint, jsonify

from api.auth import caller
from services.context import ctx, db
from services.jobs import workers

bp = Blueprint("workers", __name__, url_prefix="/api/v1")


@bp.get("/workers")
def list_workers():
    caller()  # any project's token: the workers serve every project
    settings = ctx().settings
    listed = workers.listing(db(), settings)
    return jsonify(
        {
            "workers": listed,
            "live": sum(1 for w in listed if w["alive"]),
            # Jobs run in the server's own process when no broker is set: no worker needed.
            "expected": workers.expects_workers(settings),
            "heartbeat_lapse_s": workers.lapse_s(settings),
        }
    )
