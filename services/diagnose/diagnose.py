"""Run every rule over a job, store the findings, and carry triage across jobs."""

from __future__ import annotations

import shlex

from sqlalchemy.orm import Session

from services.diagnose import (
    busy_polling,
    change_points,
    command_failed,
    event_loop_blocked,
    futex_storm,
    gil_contention,
    hot_path,
    stall,
    triage,
)
from services.diagnose.context import RuleContext
from services.diagnose.findings import SEVERITY_ORDER, fingerprint
from services.diagnose.symptoms import TIMING_RULES
from services.models import Finding, Job
from services.thresholds import Thresholds

# Rules that read the drill's evidence.
# (observer_effect is no rule: it is a note on the evidence, services/diagnose/observer_effect.py)
EVIDENCE_RULES = (
    futex_storm.check,
    gil_contention.check,
    busy_polling.check,
    event_loop_blocked.check,
    hot_path.check,
    stall.check,
)
# command_failed is no drill target: a command that always fails is traced failing.
RULES = (command_failed.check, *TIMING_RULES, *EVIDENCE_RULES)


def diagnose(session: Session, job: Job, thresholds: Thresholds) -> list[Finding]:
    """Replace the job's findings with what the rules conclude now (idempotent).

    A slower_since finding stays: later jobs of the branch put it on this one, and no
    rule over this job alone could find it again."""
    for old in list(job.findings):
        if old.kind == change_points.KIND:
            continue
        session.delete(old)
    session.flush()
    context = RuleContext(job, thresholds)
    drafts = [draft for rule in RULES for draft in rule(context)]
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
        triage.carry(session, finding)
        session.add(finding)
        findings.append(finding)
    session.flush()
    return findings
