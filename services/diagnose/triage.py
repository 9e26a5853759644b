"""Findings as the API lists and triages them."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.errors import NotFound
from services.models import Finding, Job, Project, TriageEvent, TriageStatus


def list_findings(
    session: Session,
    project: Project,
    *,
    job_id: int | None = None,
    kind: str | None = None,
    status: str | None = None,
    severity: str | None = None,
    fingerprint: str | None = None,
    test: str | None = None,
    limit: int = 100,
    before_id: int | None = None,
) -> list[Finding]:
    query = select(Finding).join(Job).where(Job.project_id == project.id).order_by(Finding.id.desc()).limit(limit)
    filters = {
        Finding.job_id: job_id,
        Finding.kind: kind,
        Finding.severity: severity,
        Finding.fingerprint: fingerprint,
        Finding.test_id: test,
        Finding.status: TriageStatus(status) if status else None,
    }
    for column, value in filters.items():
        if value is not None:
            query = query.where(column == value)
    if before_id:
        query = query.where(Finding.id < before_id)
    return list(session.scalars(query))


def get_finding(session: Session, project: Project, finding_id: int) -> Finding:
    finding = session.get(Finding, finding_id)
    if finding is None or finding.job.project_id != project.id:
        raise NotFound(f"finding {finding_id} does not exist in project {project.name}")
    return finding


def triage(
    session: Session,
    finding: Finding,
    actor: str,
    *,
    status: str | None = None,
    assignee: str | None = None,
    note: str | None = None,
    fields: set[str],
) -> Finding:
    """Change the fields the caller sent (``fields``; None clears assignee or note) and record it."""
    if "status" in fields and status is not None:
        finding.status = TriageStatus(status)
    if "assignee" in fields:
        finding.assignee = assignee
    if "note" in fields:
        finding.note = note
    session.add(
        TriageEvent(
            finding_id=finding.id, actor=actor, status=finding.status, assignee=finding.assignee, note=finding.note
        )
    )
    session.flush()
    return finding


def finding_view(session: Session, finding: Finding, history: bool = False) -> dict[str, Any]:
    view = {
        "id": finding.id,
        "job_id": finding.job_id,
        "kind": finding.kind,
        "severity": finding.severity,
        "title": finding.title,
        "detail": finding.detail,
        "config": finding.config_label,
        "test": finding.test_id,
        "metrics": finding.metrics,
        "evidence": finding.evidence_ids,
        "fingerprint": finding.fingerprint,
        "status": finding.status.value,
        "assignee": finding.assignee,
        "note": finding.note,
        "created_at": finding.created_at.isoformat(),
    }
    if history:
        view["history"] = [
            {
                "actor": e.actor,
                "status": e.status.value,
                "assignee": e.assignee,
                "note": e.note,
                "at": e.created_at.isoformat(),
            }
            for e in session.scalars(
                select(TriageEvent).where(TriageEvent.finding_id == finding.id).order_by(TriageEvent.id)
            )
        ]
    return view
