"""/api/v1/bisects: ask which commit between two revisions changed one test's time.

The request is stored as a bisect job (services/jobs/bisect_jobs.py) and answered 202 at
once: the job's own URL (GET /api/v1/jobs/{id}) follows it and, once it ends, carries the
result under ``bisect.result``.
"""

from __future__ import annotations

from flask import Blueprint, jsonify, url_for

from api.auth import caller
from api.jobs import count_submission
from api.metrics import metrics
from api.schemas import BisectCreate, json_body
from services.context import ctx, db
from services.jobs import bisect_jobs

bp = Blueprint("bisects", __name__, url_prefix="/api/v1")


@bp.post("/bisects")
def create_bisect():
    who = caller()
    count_submission(who)
    body = json_body(BisectCreate)
    session = db()
    job = bisect_jobs.submit_bisect(session, ctx().settings, who.project, body, origin="api")
    session.commit()  # the outbox sends the bisect step now, not before
    metrics().jobs_submitted.labels(source=job.source).inc()
    url = url_for("jobs.get_job", job_id=job.id)
    response = jsonify({"job_id": job.id, "status": job.status.value, "url": url})
    response.status_code = 202
    response.headers["Location"] = url
    return response
