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
    """Change the fields the caller sent (``fields``; None clears assignee or note) and record it.

    The decision is the problem's, not one job's: every occurrence of the fingerprint in
    the project takes it, so muting an older occurrence also mutes the newer ones, and the
    next job carries it (diagnose carries the latest occurrence's triage forward).
    """
    for occurrence in _occurrences(session, finding):
        if "status" in fields and status is not None:
            occurrence.status = TriageStatus(status)
        if "assignee" in fields:
            occurrence.assignee = assignee
        if "note" in fields:
            occurrence.note = note
    session.add(
        TriageEvent(
            finding_id=finding.id, actor=actor, status=finding.status, assignee=finding.assignee, note=finding.note
        )
    )
    session.flush()
    return finding


def _occurrences(session: Session, finding: Finding) -> list[Finding]:
    others = session.scalars(
        select(Finding)
        .join(Job)
        .where(
            Finding.fingerprint == finding.fingerprint,
            Job.project_id == finding.job.project_id,
            Finding.id != finding.id,
        )
    )
    return [finding, *others]


def carry(session: Session, finding: Finding) -> None:
    """Give a new finding the triage of its problem: the latest earlier occurrence's.

    Muted and acknowledged stay so; a problem marked fixed that shows up again is a
    regression and goes back to new.
    """
    with session.no_autoflush:  # the new finding must not be flushed half-built by this query
        previous = session.scalar(
            select(Finding)
            .where(Finding.fingerprint == finding.fingerprint, Finding.job_id < finding.job.id)
            .order_by(Finding.job_id.desc(), Finding.id.desc())
            .limit(1)
        )
    if previous is None:
        return
    if previous.status == TriageStatus.fixed:
        finding.status = TriageStatus.new
        finding.regression = True
    else:
        finding.status = previous.status
        finding.assignee = previous.assignee
        finding.note = previous.note


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
