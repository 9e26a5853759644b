"""Scheduled matrix jobs (services/jobs/schedule.py) on SQLite and PostgreSQL: which pushes
store a schedule, when it is due (never more often than the server's minimum, never beside
an unfinished one), what the pass creates, and that two passes at once create one job."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from services import migrate
from services.db import make_engine, make_session_factory
from services.errors import BadInput
from services.jobs import outbox, schedule
from services.jobs.dispatch import PREPARE, Step
from services.jobs.lifecycle import get_or_create_project
from services.jobs.reconcile import reconcile
from services.jobs.sources import parse_repository_config
from services.jobs.spec import JobSpec, enforce_policy
from services.jobs.submit import PullRequestRef, submit_job, trigger_of
from services.models import Job, JobKind, JobSource, JobStatus, MatrixSchedule, utcnow
from services.settings import Settings

COMMAND = ["python3", "-m", "pytest", "tests"]
HEAD = "a" * 40


@pytest.fixture
def session(db_session, tmp_path):
    # example.com is never cloned here: any host may be named.
    db_session.settings = Settings(work_dir=tmp_path / "work", repository_hosts=["*"], node_cpus=4)
    return db_session


def pushed(
    session: Session,
    every_h: float | None = 24.0,
    *,
    branch: str = "main",
    kind: str = "matrix",
    trigger: str = "push",
    commit: str = HEAD,
    command: list[str] = COMMAND,
    record: bool = True,
) -> Job:
    """A job from a GitHub push to ``branch`` as prepare_step leaves it once it has read its
    .lagtrace.yml (command, configurations, kind, the resolved commit), schedule recorded."""
    settings = session.settings
    job = submit_job(
        session,
        settings,
        get_or_create_project(session, "octo/demo"),
        JobSpec(command=command, configs=["cpuset=0", "cpus=1"], repeat=3, kind=kind),
        repository_url="https://example.com/r.git",
        ref=f"refs/heads/{branch}",
        commit_sha=commit,
        origin="github",
        github_repository="octo/demo",
        trigger=trigger,
        branch=branch,
        pull_request=PullRequestRef(7, None, "main", None) if trigger == "pull_request" else None,
    )
    source = session.get(JobSource, job.id)
    if record:
        schedule.record(session, settings, job, source, every_h)
    session.commit()
    return job


def stored(session: Session) -> list[tuple[str, float | None, int | None]]:
    return [
        (s.branch, s.every_h, s.job_id)
        for s in session.scalars(select(MatrixSchedule).order_by(MatrixSchedule.branch)).all()
    ]


def age(session: Session, job: Job, hours: float, status: JobStatus = JobStatus.done) -> None:
    """``job`` created ``hours`` ago, and finished since unless ``status`` says otherwise (an
    unfinished matrix job of the command holds the schedule whatever its age)."""
    job.created_at = utcnow() - dt.timedelta(hours=hours)
    job.status = status
    session.commit()


def test_a_push_to_a_history_branch_stores_its_schedule_and_other_jobs_do_not(session):
    main = pushed(session, 24.0)
    assert stored(session) == [("main", 24.0, main.id)]
    pushed(session, 2.0, branch="feature")  # not a branch history is kept on
    pushed(session, 2.0, trigger="pull_request", branch="main")  # a pull request reads its head's config
    assert stored(session) == [("main", 24.0, main.id)]
    later = pushed(session, 6.0, commit="b" * 40)
    assert stored(session) == [("main", 6.0, later.id)]


def test_a_later_push_without_the_field_stops_the_schedule_and_a_late_older_one_does_not_undo_it(session):
    older = pushed(session, 24.0, record=False)
    newer = pushed(session, None, commit="b" * 40)
    assert stored(session) == [("main", None, newer.id)]
    schedule.record(session, session.settings, older, session.get(JobSource, older.id), 24.0)
    session.commit()
    assert stored(session) == [("main", None, newer.id)]
    age(session, older, 48)
    age(session, newer, 48)
    assert schedule.create_due(session, session.settings) == []


def test_a_due_schedule_gets_a_matrix_job_on_the_latest_pushed_commit_and_the_clock_starts_again(session):
    push = pushed(session, 24.0, kind="gate")  # a gate is not a matrix: due at once
    [job] = schedule.create_due(session, session.settings)
    steps = outbox.pending(session)
    session.commit()
    source = session.get(JobSource, job.id)
    assert trigger_of(job) == "schedule" and job.kind is JobKind.matrix and job.parent_id is None
    assert job.command == COMMAND and [c.label for c in job.configs] == ["cpuset=0", "cpus=1"] and job.repeat == 3
    assert (source.branch, source.ref, source.commit_sha) == ("main", "refs/heads/main", HEAD)
    assert source.from_repository_config is False  # it does not read (nor store) the schedule again
    assert Step(PREPARE, job.id, "prepare") in steps
    assert schedule.create_due(session, session.settings) == []  # just created: not due
    age(session, job, 23.5)
    session.scalars(select(MatrixSchedule)).one().attempted_at = utcnow() - dt.timedelta(hours=23.5)
    session.commit()
    assert schedule.create_due(session, session.settings) == []
    age(session, job, 24.5)
    session.scalars(select(MatrixSchedule)).one().attempted_at = utcnow() - dt.timedelta(hours=24.5)
    newer = pushed(session, 24.0, kind="gate", commit="c" * 40)
    [again] = schedule.create_due(session, session.settings)
    session.commit()
    assert session.get(JobSource, again.id).commit_sha == "c" * 40  # the newest push's commit
    assert push.id < newer.id < again.id


def test_a_matrix_job_of_the_command_on_the_branch_by_any_trigger_resets_the_clock(session):
    push = pushed(session, 12.0)  # a matrix itself: not due for 12 h
    assert schedule.create_due(session, session.settings) == []
    age(session, push, 13)
    # Neither another command's matrix job on main, nor this command's on another branch, nor a gate.
    age(session, pushed(session, None, command=["pytest", "-x"], record=False), 1)
    pushed(session, None, branch="feature", record=False)
    pushed(session, None, kind="gate", record=False)
    api = submit_job(
        session,
        session.settings,
        push.project,
        JobSpec(command=COMMAND),
        repository_url="https://example.com/r.git",
        ref="refs/heads/main",
        origin="api",
    )
    session.commit()
    assert schedule.create_due(session, session.settings) == []  # the API's matrix job on main, 0 h ago
    age(session, api, 13)
    [job] = schedule.create_due(session, session.settings)
    assert job.trigger == "schedule"


def test_the_reconcilers_pass_creates_the_due_jobs(session):
    push = pushed(session, 1.0)
    age(session, push, 2)
    assert reconcile(session, session.settings) == []  # no step to resend
    session.commit()
    assert session.scalar(select(func.count()).select_from(Job).where(Job.trigger == "schedule")) == 1


def test_a_job_the_server_no_longer_allows_is_said_on_the_schedule_and_waits(session):
    push = pushed(session, 1.0)
    age(session, push, 2)
    session.settings = Settings(work_dir=session.settings.work_dir, repository_hosts=["*"], max_repeat=2)
    assert schedule.create_due(session, session.settings) == []
    session.commit()
    row = session.scalars(select(MatrixSchedule)).one()
    assert row.attempted_at is not None and "repeat" in row.error
    assert schedule.create_due(session, session.settings) == []  # tried within the hour: waits


def test_two_passes_at_once_create_one_job(database_url, tmp_path):
    settings = Settings(database_url=database_url, work_dir=tmp_path / "work", repository_hosts=["*"])
    migrate.upgrade(settings)
    engine = make_engine(settings)
    sessions = make_session_factory(engine)
    try:
        with sessions() as setup:
            setup.settings = settings
            age(setup, pushed(setup, 1.0), 2)
        with sessions() as first, sessions() as second:
            assert len(schedule.create_due(first, settings)) == 1  # its lock held until it commits
            try:
                # PostgreSQL: the locked row is skipped. SQLite has one writer: the second
                # pass fails (database is locked) instead, and creates nothing either.
                assert schedule.create_due(second, settings) == []
                second.commit()
            except OperationalError:
                assert engine.dialect.name == "sqlite"
                second.rollback()
            first.commit()
            # Once the first has committed, a pass sees its job: not due.
            assert schedule.create_due(second, settings) == []
            second.commit()
        with sessions() as check:
            assert check.scalar(select(func.count()).select_from(Job).where(Job.trigger == "schedule")) == 1
    finally:
        engine.dispose()


def test_a_schedule_below_the_servers_minimum_is_run_at_the_minimum(session):
    # Stored before the minimum was raised (a push asking for less is refused now, below):
    # 0.001 h would make a matrix job at every pass, past the submission limit.
    push = pushed(session, 0.001)
    age(session, push, 0.5)
    assert session.settings.matrix_min_interval_h == 1.0
    assert schedule.create_due(session, session.settings) == []
    age(session, push, 1.5)
    [job] = schedule.create_due(session, session.settings)
    age(session, job, 0.5)
    session.scalars(select(MatrixSchedule)).one().attempted_at = utcnow() - dt.timedelta(hours=0.5)
    session.commit()
    assert schedule.create_due(session, session.settings) == []
    lower = session.settings.model_copy(update={"matrix_min_interval_h": 0.25})
    [again] = schedule.create_due(session, lower)
    assert again.trigger == "schedule" and again.id != job.id


def test_a_lagtrace_yml_asking_for_less_than_the_minimum_is_refused_with_the_setting_named(session):
    project = get_or_create_project(session, "octo/demo")
    # The model does not know the server: it reads the value, the server's policy refuses it.
    config = parse_repository_config("command: python3 -m pytest\nmatrix_every_h: 0.5\n")
    with pytest.raises(BadInput, match=r"^matrix_every_h: 0.5 h .*LAGTRACE_MATRIX_MIN_INTERVAL_H") as refused:
        enforce_policy(config, session.settings, project)
    assert refused.value.field == "matrix_every_h"
    assert enforce_policy(config, session.settings.model_copy(update={"matrix_min_interval_h": 0.5}), project)
    assert enforce_policy(config.model_copy(update={"matrix_every_h": 1.0}), session.settings, project)


@pytest.mark.parametrize("status", [JobStatus.queued, JobStatus.running])
def test_no_second_scheduled_job_while_the_last_is_queued_or_running(session, status):
    push = pushed(session, 1.0)
    age(session, push, 2)
    [job] = schedule.create_due(session, session.settings)
    # Still waiting for a worker, or slower than every_h: its hours are up, it is not doubled.
    age(session, job, 5, status=status)
    session.scalars(select(MatrixSchedule)).one().attempted_at = utcnow() - dt.timedelta(hours=5)
    session.commit()
    assert schedule.create_due(session, session.settings) == []
    age(session, job, 5, status=JobStatus.failed)
    [again] = schedule.create_due(session, session.settings)
    assert again.trigger == "schedule" and again.id != job.id
