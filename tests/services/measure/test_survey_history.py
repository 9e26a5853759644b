"""The survey remembers: a test the previous job of the same command flagged is rerun."""

from __future__ import annotations

from services.jobs.shards import shard_job
from services.measure.survey import flagged_before, previous_job, spread_since
from services.models import Finding, JobShard, JobStatus, Run, RunKind, TestResult
from services.thresholds import Thresholds
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


def surveyed(session, job, durations: dict[str, float]) -> Run:
    """A survey run of ``job``'s configuration with these test durations."""
    run = Run(
        config=job.configs[0],
        kind=RunKind.survey,
        repetition=0,
        wall_s=sum(durations.values()),
        user_s=0.1,
        sys_s=0.01,
        max_rss_kb=10_000,
        voluntary_ctx_switches=5,
        involuntary_ctx_switches=0,
        exit_code=0,
        test_results=[TestResult(test_id=t, duration_s=d, outcome="passed") for t, d in durations.items()],
    )
    session.add(run)
    session.flush()
    return run


def test_a_test_whose_survey_sits_in_another_mode_than_the_previous_surveys_is_kept(db_session):
    # The bimodal test ran in its fast mode in the previous survey, in its slow one now; a
    # steady test moved by noise; a test new to this job has nothing to compare with.
    previous = waiting_job(db_session)
    previous.status = JobStatus.done
    surveyed(db_session, previous, {"t.py::test_bimodal": 0.04, "t.py::test_steady": 0.30})
    current = waiting_job(db_session)
    now = surveyed(db_session, current, {"t.py::test_bimodal": 0.40, "t.py::test_steady": 0.36, "t.py::test_new": 0.9})
    runs = {current.configs[0].label: now}
    assert spread_since(db_session, current, runs, Thresholds()) == {"t.py::test_bimodal"}
    assert spread_since(db_session, previous, {"cpuset=0": now}, Thresholds()) == set()  # no job before it
