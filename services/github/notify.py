"""The notify step: a job's GitHub check run, brought to the job's state.

GitHub is an adapter over the jobs: this module uses services.jobs, never the other way
round; services/steps.py puts it in the ledger's table of step handlers.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.github.client import GitHubClient, GitHubError, check_run_body, check_run_head_sha
from services.jobs import lifecycle, summaries
from services.jobs.report import build_report
from services.models import Bisect, JobKind, JobSource, JobTask, TaskState, database_now
from services.settings import Settings


def notify_github(session: Session, settings: Settings, task: JobTask) -> None:
    """Bring the GitHub check run to the job's current state (create it the first time)."""
    job = task.job
    source = session.scalar(select(JobSource).where(JobSource.job_id == job.id).with_for_update())
    if source is None or not source.github_repository:
        task.state = TaskState.done
        return
    if job.kind is JobKind.bisect:
        # A bisect has no report: its check run reads the Bisect row (services/github/client.py
        # bisect_check_run_body). Asked for by hand it has no pushed commit, and its bad end
        # is known once the step resolved it: before that, nothing to attach a check run to.
        bisect = session.get(Bisect, job.id)
        if check_run_head_sha(source, bisect) is None:
            task.state = TaskState.done
            return
        body = check_run_body(settings, job, source, None, bisect)
    else:
        report = (
            (summaries.stored_report(session, job) or build_report(job, settings.thresholds))
            if job.status in lifecycle.FINISHED
            else None
        )
        body = check_run_body(settings, job, source, report)
    client = GitHubClient(settings)
    try:
        if source.github_check_run_id:
            client.update_check_run(source.github_repository, source.github_check_run_id, body)
        else:
            source.github_check_run_id = client.create_check_run(source.github_repository, body)
    except GitHubError as exc:
        task.error = str(exc)
        if task.attempts >= settings.task_max_attempts:
            task.state = TaskState.failed
            job.notes = [*job.notes, f"the GitHub check run could not be updated: {exc}"]
        else:
            # Back to the ledger: the reconciler sends it again once this backoff is over.
            task.state = TaskState.pending
            task.lease_expires_at = database_now(session) + dt.timedelta(seconds=30 * task.attempts)
        return
    task.state = TaskState.done
