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
    timing_disagrees,
    triage,
)
from services.diagnose.context import RuleContext
from services.diagnose.findings import SEVERITY_ORDER, FindingDraft, fingerprint
from services.diagnose.metrics import CommandFailedMetrics, ratio_of
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
# timing_disagrees neither: it says the job's numbers cannot be trusted, and a tracer
# would not tell who rewrote them.
RULES = (command_failed.check, timing_disagrees.check, *TIMING_RULES, *EVIDENCE_RULES)


def diagnose(session: Session, job: Job, thresholds: Thresholds) -> list[Finding]:
    """Replace the job's findings with what the rules conclude now (idempotent).

    A slower_since finding stays: later jobs of the branch put it on this one, and no
    rule over this job alone could find it again."""
    for old in list(job.findings):
        if old.kind == change_points.KIND:
            continue
        # Out of the job's collection (delete-orphan deletes it), not only deleted: a
        # report built from the job in this session read the deleted findings beside the
        # new ones (tests/services/diagnose/test_diagnose_again.py).
        job.findings.remove(old)
    session.flush()
    context = RuleContext(job, thresholds)
    drafts = [draft for rule in RULES for draft in rule(context)]
    drafts.sort(key=lambda d: (SEVERITY_ORDER.get(d.severity, 9), -(ratio_of(d.metrics) or 0.0)))
    findings = []
    for draft in drafts:
        scope = scope_of(draft, job.command)
        finding = Finding(
            job=job,
            kind=draft.kind,
            severity=draft.severity,
            title=draft.title if draft.test_id else command_title(draft.title, job.command),
            detail=draft.detail,
            config_label=draft.config_label,
            test_id=draft.test_id,
            # The one place a draft's typed numbers become the JSON the finding stores.
            metrics=draft.metrics.stored(),
            evidence_ids=draft.evidence_ids,
            fingerprint=fingerprint(job.project.name, draft.kind, scope),
        )
        triage.carry(session, finding)
        session.add(finding)
        findings.append(finding)
    session.flush()
    return findings


def scope_of(draft: FindingDraft, command: list[str]) -> str:
    """What a finding's fingerprint groups by beside its project and kind: its test, or the
    command. How a command failed is part of its problem: a suite that collects no test and
    one whose module cannot be imported are two problems, triaged apart."""
    scope = draft.test_id or "command:" + shlex.join(command)
    if draft.kind == command_failed.KIND:
        failure = draft.metrics.failure if isinstance(draft.metrics, CommandFailedMetrics) else None
        scope += "\x1f" + (failure or command_failed.EXITED)
    return scope


# A command named in a title is cut to this many characters: an inbox row stays one line.
COMMAND_SHOWN = 48


def short_command(command: list[str]) -> str:
    """The command as a title names it: its program's own name (not the path to it) and
    its arguments, cut in the middle past COMMAND_SHOWN characters."""
    if not command:
        return "(no command)"
    text = shlex.join([command[0].rsplit("/", 1)[-1], *command[1:]])
    if len(text) <= COMMAND_SHOWN:
        return text
    half = (COMMAND_SHOWN - 3) // 2
    return f"{text[:half]}...{text[-half:]}"


def command_title(title: str, command: list[str]) -> str:
    """A finding about the whole command names the command: in the inbox, problems of
    several projects' or jobs' commands otherwise read alike ("The command varies widely
    between runs with cpuset=0-1" three times over)."""
    named = f"`{short_command(command)}`"
    if title.startswith("The command "):
        return f"The command {named} {title.removeprefix('The command ')}"
    return f"{title} ({named})"
