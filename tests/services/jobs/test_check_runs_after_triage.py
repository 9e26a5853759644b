"""Muting a problem queues a notify step for each finished job whose check run showed it."""

from __future__ import annotations

from sqlalchemy import select

from services.diagnose import triage
from services.jobs.check_runs import refresh_after_triage
from services.models import JobSource, JobStatus, JobTask
from services.settings import Settings
from tests.support.findings import the_finding, waiting_job


def test_muting_queues_a_check_run_update_for_every_job_that_showed_the_problem(db_session):
    settings = Settings(database_url="sqlite://")
    findings = []
    for check_run_id in (101, 102, None):  # the last job came from the API: no check run
        job = waiting_job(db_session)
        job.status = JobStatus.done
        db_session.add(
            JobSource(job_id=job.id, kind="git", github_repository="octo/demo", github_check_run_id=check_run_id)
        )
        findings.append(the_finding(db_session, job))
    db_session.flush()
    triage.triage(db_session, findings[0], "ana", status="muted", fields={"status"})
    refreshed = refresh_after_triage(db_session, settings, findings[0])
    assert refreshed == [findings[1].job_id, findings[0].job_id]
    names = db_session.scalars(select(JobTask.name).where(JobTask.job_id.in_(refreshed))).all()
    assert sorted(names) == ["notify:triage:0", "notify:triage:0"]
    # A second decision queues another step, not a duplicate name.
    refresh_after_triage(db_session, settings, findings[0])
    assert "notify:triage:1" in db_session.scalars(select(JobTask.name)).all()
