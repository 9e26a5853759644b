"""/api/v1/jobs: create, get, list, cancel, rerun; a change point confirmed by a new job."""

from __future__ import annotations

import json

from flask import Blueprint, Response, jsonify, request, url_for

from api.auth import caller
from api.errors import BadRequest
from api.metrics import metrics
from api.schemas import JobCreate, JobListQuery, Rerun, json_body, parse_json_text, query
from services.context import ctx, db
from services.diagnose import triage
from services.jobs import lifecycle, summaries
from services.jobs import submit as submissions

bp = Blueprint("jobs", __name__, url_prefix="/api/v1")


def _created(job):
    session = db()
    session.commit()  # the outbox sends the job's first step now, not before
    metrics().jobs_submitted.labels(source=job.source).inc()
    response = jsonify(submissions.job_detail(session, job, ctx().settings.thresholds, settings=ctx().settings))
    response.status_code = 201
    response.headers["Location"] = url_for("jobs.get_job", job_id=job.id)
    return response


def count_submission(who) -> None:
    # Per token: one leaked or scripted token cannot fill the queue (and the workers).
    ctx().submissions.take(f"token:{who.token_id}", "job submissions with this token")


@bp.post("/jobs")
def create_job():
    who = caller()
    count_submission(who)
    if request.mimetype == "multipart/form-data":
        if "archive" not in request.files:
            raise BadRequest(
                "archive: missing (multipart field `archive`, a tar or tar.gz of the code)",
                422,
                [{"field": "archive", "message": "missing"}],
            )
        spec = parse_json_text(JobCreate, request.form.get("job", ""), "form field `job`", "job")
        if spec.repository is not None:
            raise BadRequest(
                "repository: give either a repository or an archive, not both",
                422,
                [{"field": "repository", "message": "not allowed with an archive"}],
            )
        archive = request.files["archive"].read()
        job = submissions.submit_job(db(), ctx().settings, who.project, spec, archive=archive)
    else:
        spec = json_body(JobCreate)
        if spec.repository is None:
            raise BadRequest(
                "repository: required (or upload an archive as multipart/form-data)",
                422,
                [{"field": "repository", "message": "required"}],
            )
        job = submissions.submit_job(
            db(), ctx().settings, who.project, spec, repository_url=spec.repository.url, ref=spec.repository.ref
        )
    return _created(job)


@bp.get("/jobs")
def list_jobs():
    who = caller()
    params = query(JobListQuery)
    jobs = submissions.list_job_summaries(
        db(), who.project, status=params.status, limit=params.limit, before_id=params.before_id
    )
    return jsonify({"jobs": jobs, "next_before_id": jobs[-1]["id"] if len(jobs) == params.limit else None})


@bp.get("/jobs/<int:job_id>")
def get_job(job_id: int):
    who = caller()
    job = submissions.get_job(db(), who.project, job_id)
    stored = summaries.stored_report_text(db(), job) if job.status in lifecycle.FINISHED else None
    if stored is None:
        return jsonify(submissions.job_detail(db(), job, ctx().settings.thresholds, settings=ctx().settings))
    # The report as stored when the job finished, spliced in as it is (not parsed and
    # serialised again): the same document, the report last.
    detail = submissions.job_detail(db(), job, ctx().settings.thresholds, with_report=False, settings=ctx().settings)
    head = json.dumps(detail, default=str, separators=(",", ":"))
    return Response(head[:-1] + ',"report":' + stored + "}", mimetype="application/json")


@bp.post("/jobs/<int:job_id>/cancel")
def cancel_job(job_id: int):
    who = caller()
    session = db()
    job = submissions.get_job(session, who.project, job_id)
    lifecycle.cancel_job(session, ctx().settings, job, who.token_name)
    session.commit()
    return jsonify(submissions.job_detail(session, job, ctx().settings.thresholds, settings=ctx().settings))


@bp.post("/jobs/<int:job_id>/rerun")
def rerun_job(job_id: int):
    who = caller()
    count_submission(who)
    body = json_body(Rerun)
    parent = submissions.get_job(db(), who.project, job_id)
    job = submissions.rerun_job(
        db(), ctx().settings, parent, configs=body.configs, repeat=body.repeat, timeout_s=body.timeout_s
    )
    return _created(job)


@bp.post("/findings/<int:finding_id>/confirm")
def confirm_finding(finding_id: int):
    """A slower_since finding's two commits screened interleaved: a new job, as a rerun is."""
    who = caller()
    count_submission(who)
    finding = triage.get_finding(db(), who.project, finding_id)
    job = submissions.confirm_slower_since(db(), ctx().settings, finding, origin="api")
    return _created(job)
