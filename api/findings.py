"""/api/v1/findings: list with filters, get, triage."""

from __future__ import annotations

from flask import Blueprint, jsonify

from api.auth import caller
from api.schemas import FindingListQuery, Triage, json_body, query
from services.context import ctx, db
from services.diagnose import triage
from services.jobs import check_runs

bp = Blueprint("findings", __name__, url_prefix="/api/v1")


@bp.get("/findings")
def list_findings():
    who = caller()
    params = query(FindingListQuery)
    found = triage.list_findings(
        db(),
        who.project,
        **params.model_dump(exclude={"limit", "before_id"}),
        limit=params.limit,
        before_id=params.before_id,
    )
    return jsonify(
        {
            "findings": [triage.finding_view(db(), f) for f in found],
            "next_before_id": found[-1].id if len(found) == params.limit else None,
        }
    )


@bp.get("/findings/<int:finding_id>")
def get_finding(finding_id: int):
    who = caller()
    return jsonify(triage.finding_view(db(), triage.get_finding(db(), who.project, finding_id), history=True))


@bp.patch("/findings/<int:finding_id>")
def triage_finding(finding_id: int):
    who = caller()
    body = json_body(Triage)
    session = db()
    finding = triage.get_finding(session, who.project, finding_id)
    triage.triage(
        session,
        finding,
        who.token_name,
        status=body.status,
        assignee=body.assignee,
        note=body.note,
        fields=set(body.model_fields_set),
    )
    check_runs.refresh_after_triage(session, ctx().settings, finding)
    session.commit()
    return jsonify(triage.finding_view(session, finding, history=True))
