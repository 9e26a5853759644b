"""What a job's finish makes for the pages (services/jobs/summaries.py): its stored report
and digest, its problems' sums for the inbox, the catalogue; on both databases, through
the engine's own finish (tests/support/branch_history.py pushes finish in diagnose_phase)."""

from __future__ import annotations

import random

from sqlalchemy import func, select

from services.diagnose import inbox
from services.models import Finding, Job
from services.settings import Settings
from services.summary_models import CataloguedJob, JobReport, ProblemSummary
from tests.support import branch_history


def test_a_finish_stores_the_report_sums_the_problems_and_catalogues_the_job(db_session, tmp_path):
    settings = Settings(database_url="sqlite://", artifact_dir=tmp_path / "artifacts")
    rng = random.Random(24)
    jobs = [branch_history.push(db_session, settings, rng, n) for n in range(branch_history.STEP_AT + 4)]
    db_session.flush()
    # Every finished job's report is stored, with its digest for the page.
    stored = db_session.scalars(select(JobReport).where(JobReport.job_id.in_([j.id for j in jobs]))).all()
    assert len(stored) == len(jobs)
    newest = next(s for s in stored if s.job_id == jobs[-1].id)
    assert newest.report["job"]["id"] == jobs[-1].id and newest.page["tests_total"] == 1 + len(branch_history.FLAT)
    # The step found after a later push went on the first slow push's job: that job's
    # stored report was made again with it.
    step = db_session.scalars(select(Finding).where(Finding.kind == "slower_since")).one()
    culprit = db_session.get(JobReport, step.job_id)
    assert [f["id"] for f in culprit.report["findings"] if f["kind"] == "slower_since"] == [step.id]
    # Its problem is summed: one job, this finding the newest; the inbox lists it.
    group = db_session.get(ProblemSummary, step.fingerprint)
    assert (group.recurrence, group.latest_id, group.kind, group.test_id) == (
        1,
        step.id,
        "slower_since",
        branch_history.STEPPED,
    )
    project = db_session.get(Job, jobs[0].id).project_id
    assert [g.latest.id for g in inbox.inbox(db_session, [project], kind="slower_since")] == [step.id]
    # And every finished job is in the catalogue.
    assert db_session.scalar(select(func.count()).select_from(CataloguedJob)) == len(jobs)


def test_the_sums_rebuilt_from_scratch_equal_the_ones_kept_job_by_job(db_session, tmp_path):
    settings = Settings(database_url="sqlite://", artifact_dir=tmp_path / "artifacts")
    rng = random.Random(7)
    for n in range(branch_history.STEP_AT + 4):
        branch_history.push(db_session, settings, rng, n)
    db_session.flush()

    def sums() -> set[tuple]:
        return {
            (g.fingerprint, g.project_id, g.kind, g.test_id, g.latest_id, g.recurrence, round(g.ratio, 9))
            for g in db_session.scalars(select(ProblemSummary))
        }

    kept = sums()
    assert kept
    inbox.rebuild_groups(db_session)  # the migration's statement
    db_session.expire_all()
    assert sums() == kept
