"""Run every rule over a job and store the findings."""

from __future__ import annotations

import shlex

from sqlalchemy.orm import Session

from services.analysis import cpu_sensitivity
from services.analysis.findings import SEVERITY_ORDER, fingerprint
from services.models import Finding, Job
from services.samples import collect
from services.thresholds import Thresholds

RULES = (cpu_sensitivity.check,)


def diagnose(session: Session, job: Job, thresholds: Thresholds) -> list[Finding]:
    """Replace the job's findings with what the rules conclude now (idempotent)."""
    for old in list(job.findings):
        session.delete(old)
    session.flush()
    samples = collect(job)
    drafts = [draft for rule in RULES for draft in rule(samples, thresholds)]
    drafts.sort(key=lambda d: (SEVERITY_ORDER.get(d.severity, 9), -float(d.metrics.get("ratio", 0))))
    findings = []
    for draft in drafts:
        scope = draft.test_id or "command:" + shlex.join(job.command)
        finding = Finding(
            job=job,
            kind=draft.kind,
            severity=draft.severity,
            title=draft.title,
            detail=draft.detail,
            config_label=draft.config_label,
            test_id=draft.test_id,
            metrics=draft.metrics,
            evidence_ids=draft.evidence_ids,
            fingerprint=fingerprint(job.project.name, draft.kind, scope),
        )
        session.add(finding)
        findings.append(finding)
    session.flush()
    return findings
