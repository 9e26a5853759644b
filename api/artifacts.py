"""/api/v1/artifacts/<key>: an evidence file (core, flame graph, profile), decompressed."""

from __future__ import annotations

from flask import Blueprint, send_file

from api.auth import caller
from services.context import ctx, db
from services.errors import NotFound
from services.jobs.submit import find_artifact
from services.measure.artifacts import make_artifact_store

bp = Blueprint("artifacts", __name__, url_prefix="/api/v1")


@bp.get("/artifacts/<path:key>")
def download(key: str):
    who = caller()
    artifact = find_artifact(db(), who.project, key)
    try:
        reader = make_artifact_store(ctx().settings).open(key)
    except FileNotFoundError:
        raise NotFound(f"artifact {key!r} is gone (past LAGTRACE_ARTIFACT_RETENTION_DAYS)") from None
    return send_file(reader, mimetype=artifact["media_type"], as_attachment=True, download_name=artifact["name"])
