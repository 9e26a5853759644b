"""The confirm step as the job engine runs it (services/jobs/engine.py): after the drill,
each diagnosed cause with a knob, turned (services/measure/confirm.py)."""

from __future__ import annotations

import statistics
from pathlib import Path

from sqlalchemy.orm import Session

from services.diagnose import diagnose
from services.diagnose.diagnoses import build_diagnoses
from services.diagnose.findings import Severity
from services.diagnose.report_parts import Diagnosis
from services.jobs.report import report_finding
from services.jobs.workspace import Checkpoint, Progress
from services.measure import confirm
from services.measure.executors import Executor
from services.models import Job, JobConfig, RunKind
from services.settings import Settings
from services.thresholds import Thresholds


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
    labels = {finding.id: finding.config_label for finding in findings}
    causes = [
        confirm.Cause(d.test, d.cause.kind, d.cause.finding)
        for d in diagnoses
        # A command that failed or hung has no time for a knob to change.
        if d.cause is not None
        and not d.cause.from_command
        and d.symptom.kind != "command_failed"
        and _worth_proving(d, job, labels.get(d.cause.finding), settings.thresholds)
    ]
    return confirm.confirm(
        session, job, executor, settings.thresholds, causes, workdir=workdir, progress=progress, checkpoint=checkpoint
    )


def _worth_proving(diagnosis: Diagnosis, job: Job, label: str | None, thresholds: Thresholds) -> bool:
    """A medium or high diagnosis; a low note only where its cause accounts for most of its
    subject's time there (Thresholds.confirm_low_share): a 0.8 s pytest start-up in a 0.83 s
    run is a low note by its seconds (examples/corpus/pytest_plugins), and the whole run by
    its share, so a knob that takes it out is worth its runs; a low note on a sliver is not."""
    if diagnosis.severity in (Severity.medium, Severity.high):
        return True
    accounts_s = diagnosis.cause.accounts_s if diagnosis.cause is not None else None
    config = next((c for c in job.configs if c.label == label), None)
    if not accounts_s or config is None:
        return False
    subject_s = _subject_s(config, diagnosis.test)
    return subject_s is not None and accounts_s >= thresholds.confirm_low_share * subject_s


def _subject_s(config: JobConfig, test: str | None) -> float | None:
    """The subject's median time in the configuration's timing runs: the command's wall, or the test's duration."""
    runs = [run for run in config.runs if run.kind is RunKind.timing and run.exit_code == 0]
    if test is None:
        values = [run.wall_s for run in runs]
    else:
        values = [r.duration_s for run in runs for r in run.test_results if r.test_id == test and r.outcome == "passed"]
    return statistics.median(values) if values else None
