"""The survey remembers: a test the previous job of the same command flagged is rerun."""

from __future__ import annotations

from services.jobs.shards import shard_job
from services.measure.survey import flagged_before, previous_job
from services.models import Finding, JobShard, JobStatus
from tests.support.findings import waiting_job


def flag(session, job, test_id: str | None) -> None:
    session.add(
        Finding(
            job_id=job.id,
            kind="latency_flaky",
            severity="medium",
            title="t",
            detail="d",
            test_id=test_id,
            fingerprint=f"{job.id}-{test_id}",
        )
    )


def test_only_the_previous_finished_job_of_the_same_command_and_project_counts(db_session):
    older = waiting_job(db_session)
    older.status = JobStatus.done
    flag(db_session, older, "t.py::test_old")
    previous = waiting_job(db_session)
    previous.status = JobStatus.done
    flag(db_session, previous, "t.py::test_bimodal")
    flag(db_session, previous, None)  # about the whole command: no test to rerun
    failed = waiting_job(db_session)
    failed.status = JobStatus.failed
    flag(db_session, failed, "t.py::test_from_a_failed_job")
    other = waiting_job(db_session, project="octo/other")
    other.status = JobStatus.done
    flag(db_session, other, "t.py::test_elsewhere")
    current = waiting_job(db_session)
    db_session.flush()

    assert previous_job(db_session, current) is previous
    assert flagged_before(db_session, current) == {"t.py::test_bimodal"}
    assert flagged_before(db_session, older) == set()  # nothing before it


def test_a_shard_remembers_what_the_previous_job_of_the_whole_suite_flagged(db_session, tmp_path):
    # A shard's view narrows the command to its tests; the previous job ran the suite whole.
    previous = waiting_job(db_session)
    previous.status = JobStatus.done
    flag(db_session, previous, "t.py::test_bimodal")
    current = waiting_job(db_session)
    db_session.flush()
    (tmp_path / "t.py").write_text("def test_bimodal():\n    pass\n")
    shard = shard_job(current, JobShard(index=1, tests=["t.py"]), tmp_path)
    assert shard.command != current.command
    assert flagged_before(db_session, shard) == {"t.py::test_bimodal"}
