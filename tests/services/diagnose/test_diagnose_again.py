"""Diagnosing a job again (a diagnose step resumed after its worker died, a corpus side
judged again by today's rules) replaces its findings, in the database and in the job."""

from __future__ import annotations

from sqlalchemy import func, select

from services.diagnose.diagnose import diagnose
from services.jobs.report import build_report
from services.models import Finding
from services.thresholds import Thresholds
from tests.support.findings import waiting_job


def test_a_job_diagnosed_again_holds_only_the_new_findings(db_session):
    job = waiting_job(db_session)
    first = diagnose(db_session, job, Thresholds())
    again = diagnose(db_session, job, Thresholds())
    assert [f.kind for f in again] == [f.kind for f in first] == ["off_cpu_wait"]
    assert job.findings == again
    stored = db_session.scalar(select(func.count()).select_from(Finding).where(Finding.job_id == job.id))
    assert stored == 1
    # The report built in the same session tells each finding once.
    assert [f.kind for f in build_report(job, Thresholds()).findings] == ["off_cpu_wait"]
