"""A triage decision reaches the GitHub check runs it changes, without a rerun.

Muting or acknowledging a finding changes the conclusion of every check run that showed
the problem (services/github/client.py conclusion); each such job gets one more notify
step, which brings its check run to the job's state as the report now reads.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from services.jobs.dispatch import NOTIFY
from services.jobs.ledger import add_task
from services.jobs.lifecycle import FINISHED
from services.models import Finding, Job, JobSource, JobTask
from services.settings import Settings

# The newest jobs of the problem whose check runs are brought up to date: older check
# runs belong to commits nobody looks at any more.
MAX_REFRESHED = 10


def refresh_after_triage(session: Session, settings: Settings, finding: Finding) -> list[int]:
    """Queue a notify step for the finished jobs with a check run that hold this problem; their ids."""
    # Ids first: DISTINCT over whole rows fails on PostgreSQL's json columns.
    ids = session.scalars(
        select(Job.id)
        .join(Finding, Finding.job_id == Job.id)
        .join(JobSource, JobSource.job_id == Job.id)
        .where(
            Finding.fingerprint == finding.fingerprint,
            Job.project_id == finding.job.project_id,
            JobSource.github_check_run_id.is_not(None),
            Job.status.in_(FINISHED),
        )
        .distinct()
        .order_by(Job.id.desc())
        .limit(MAX_REFRESHED)
    ).all()
    jobs = [job for job in (session.get(Job, job_id) for job_id in ids) if job is not None]
    for job in jobs:
        sent = session.scalar(
            select(func.count()).select_from(JobTask).where(JobTask.job_id == job.id, JobTask.step == NOTIFY)
        )
        add_task(session, job, settings, NOTIFY, f"{NOTIFY}:triage:{sent}")
    return [job.id for job in jobs]
