"""The confirm step as the job engine runs it (services/jobs/engine.py): after the drill,
each diagnosed cause with a knob, turned (services/measure/confirm.py)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.orm import Session

from services.diagnose import diagnose
from services.diagnose.diagnoses import build_diagnoses
from services.diagnose.findings import Severity
from services.jobs.report import report_finding
from services.jobs.workspace import Checkpoint, Progress
from services.measure import confirm
from services.measure.executors import Executor
from services.models import Job
from services.settings import Settings


def confirm_phase(
    session: Session,
    settings: Settings,
    job: Job,
    executor: Executor,
    *,
    workdir: Path,
    progress: Progress,
    checkpoint: Checkpoint,
) -> int:
    """The rules run now to say which causes the diagnoses name, as the report will
    (engine.diagnose_phase runs them again beside the experiments); each cause with a
    knob is turned. Nothing where no evidence was asked for (``--evidence none``)."""
    if job.probes == []:
        return 0
    findings = diagnose(session, job, settings.thresholds)
    diagnoses = build_diagnoses([report_finding(f) for f in findings], {e.id: e.kind for e in job.evidence})
    causes = [
        confirm.Cause(d.test, d.cause.kind, d.cause.finding)
        for d in diagnoses
        # A command that failed or hung has no time for a knob to change; a low note is
        # no slowdown worth runs to prove.
        if d.cause is not None
        and not d.cause.from_command
        and d.symptom.kind != "command_failed"
        and d.severity in (Severity.medium, Severity.high)
    ]
    return confirm.confirm(
        session, job, executor, settings.thresholds, causes, workdir=workdir, progress=progress, checkpoint=checkpoint
    )
