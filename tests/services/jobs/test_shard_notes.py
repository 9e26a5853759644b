"""Two shards screened at once write their own notes and budget records; the last one to
finish folds them into the job's (services/jobs/shards.py), and the job's budget is
measured on the whole suite, not on one shard."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from services import migrate
from services.db import make_engine, make_session_factory
from services.jobs import engine as engine_module
from services.jobs import shards
from services.jobs.lifecycle import create_job
from services.measure import budget
from services.measure.configs import CpuConfig
from services.models import Job, JobShard, Run, RunKind
from services.settings import Settings
from services.thresholds import Thresholds

THRESHOLDS = Thresholds()


def sharded_job(session) -> Job:
    job = create_job(
        session,
        project="octo/demo",
        command=["python3", "-m", "pytest", "tests"],
        configs=[CpuConfig(label="cpuset=0,1"), CpuConfig(label="cpuset=0", cpuset=(0,))],
        executor="local",
        workdir=None,
        repeat=5,
        timeout_s=None,
        notes=["prepared on node-a"],
    )
    for index in (1, 2):
        session.add(JobShard(job_id=job.id, index=index, tests=[f"tests/test_{index}.py"], test_count=100))
    session.flush()
    return job


def surveyed(job: Job, shard: int, wall_s: float) -> None:
    for config in job.configs:
        config.runs.append(
            Run(
                kind=RunKind.survey,
                repetition=0,
                shard=shard,
                wall_s=wall_s,
                user_s=wall_s,
                sys_s=0.1,
                max_rss_kb=10_000,
                voluntary_ctx_switches=5,
                involuntary_ctx_switches=0,
                exit_code=0,
            )
        )


@pytest.mark.postgres  # shards run on the service's PostgreSQL; SQLite has one writer
def test_two_shards_writing_at_once_keep_both_their_notes_and_left_out_tests(postgres_url, tmp_path: Path):
    settings = Settings(database_url=postgres_url)
    migrate.upgrade(settings)
    engine = make_engine(settings)
    factory = make_session_factory(engine)
    with factory() as session:
        job_id = sharded_job(session).id
        session.commit()

    # Both shards read the job, then each writes and commits: the second commit must not
    # write back the job as it read it before the first.
    first, second = factory(), factory()
    views = []
    for session, index in ((first, 1), (second, 2)):
        job = session.get(Job, job_id)
        shard = session.scalar(select(JobShard).where(JobShard.job_id == job_id, JobShard.index == index))
        # Each shard's screen holds its own node's measurement lock (two nodes here).
        on_node = settings.model_copy(update={"node_name": f"node-{index}", "node_lock_path": tmp_path / f"{index}"})
        with engine_module.screen_lock(on_node, job, shard=shard):
            pass
        views.append(shards.shard_job(job, shard, tmp_path))
    for view, index in zip(views, (1, 2), strict=True):
        view.notes = [*view.notes, f"shard {index}: 3 of the 5 tests the survey kept were cleared"]
        budget.leave_out(view, THRESHOLDS, budget.TESTS, [f"tests/test_{index}.py::test_slowish"])
    first.commit()
    second.commit()
    first.close()
    second.close()

    with factory() as session:
        job = session.get(Job, job_id)
        assert job.notes == ["prepared on node-a"]  # nothing of a shard's before the fold
        assert not job.measured_on
        shards.fold(session, job)
        shards.fold(session, job)  # a second fold adds nothing
        session.commit()
        assert job.notes == [
            "prepared on node-a",
            "shard 1: 3 of the 5 tests the survey kept were cleared",
            "shard 2: 3 of the 5 tests the survey kept were cleared",
        ]
        assert job.budget is not None
        assert job.budget["left_out"] == {"tests": ["tests/test_1.py::test_slowish", "tests/test_2.py::test_slowish"]}
        assert [(place["node"], place["shard"]) for place in job.measured_on] == [("node-1", 1), ("node-2", 2)]
    engine.dispose()


def test_a_sharded_jobs_budget_is_measured_on_the_whole_suite(db_session):
    job = sharded_job(db_session)
    surveyed(job, 1, 30.0)
    surveyed(job, 2, 34.0)
    db_session.flush()
    # The suite's own time is both shards' surveys in the widest configuration, not the
    # first shard's alone (which left the drill a budget the screen had already spent).
    assert budget.reference_s(job) == 64.0
    assert budget.limit_s(job, THRESHOLDS) == max(THRESHOLDS.budget_floor_s, THRESHOLDS.budget_multiple * 64.0)

    with shards.only(db_session, 2):
        # A shard's own screen sees its own runs: its share of the suite.
        assert budget.reference_s(db_session.get(Job, job.id)) == 34.0
