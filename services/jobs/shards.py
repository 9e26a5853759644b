"""Shards across workers (docs/guides/service.md): one job's survey and focused screen split by tests.

Prepare splits a pytest suite into shards (services/measure/shards.py) when
LAGTRACE_SHARDS allows more than one and the suite is big enough, and records one screen
step per shard in the job ledger (``screen:shard-1``, ...): each is an ordinary ledger
step, sent by the outbox as a Celery message on the measurement queue, claimed under a
lease, renewed by the step's heartbeat, and sent again by the reconciler when its worker
is lost, so a killed worker costs its own shard only. A shard's step is the screen of
the job's command narrowed to its tests, every configuration interleaved, on the node of
the worker that claimed it; its runs carry the shard's number, and while it runs its
session sees only those (``only``), so its survey, its focus and its stopping rule are
the whole screen's own code over its own runs, and no comparison crosses nodes (a test
lives in one shard). A pull request's shard screens the base commit beside its head on
the same node, narrowed to the shard's tests that the base has (``base_side``). The last
shard to finish records the finish step (drill, then diagnose) under a lock on the job's
row: a join in the ledger, not a scheduler. Each shard writes its notes and budget record
on its own row; that last shard folds them into the job's.
"""

from __future__ import annotations

import dataclasses
import math
import secrets
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from sqlalchemy import event, func, select
from sqlalchemy.orm import ORMExecuteState, Session, with_loader_criteria

from services.jobs import ledger
from services.jobs.dispatch import SCREEN
from services.measure import pytest_command, survey
from services.measure import shards as split
from services.measure.executors.base import Executor
from services.measure.screen import BaseSide
from services.models import TEST_HISTORY_KINDS, Job, JobConfig, JobKind, JobShard, JobTask, Run, TaskState, TestResult
from services.settings import Settings

PREFIX = f"{SCREEN}:shard-"


def task_name(index: int) -> str:
    return f"{PREFIX}{index}"


def plan(
    session: Session,
    settings: Settings,
    job: Job,
    executor: Executor,
    workdir: Path,
    *,
    progress: Callable[[str], None] = lambda line: None,
) -> tuple[list[split.Shard], str | None]:
    """The shards ``job`` is screened in (none: whole, on one worker), and a note saying why
    it was or was not split when that is worth saying."""
    # A gate runs the suite once against its history (services/jobs/gate.py), on one node.
    if settings.shards < 2 or not pytest_command.is_pytest(job.command) or job.kind is JobKind.gate:
        return [], None
    history = previous_durations(session, job)
    collected = split.collect(executor, job.command, workdir, job.timeout_s)
    if isinstance(collected, str):
        return [], f"not split into shards: {collected}"
    least = settings.thresholds.focus_min_tests
    count = min(settings.shards, collected.tests // least)
    if history:
        # A round's cost over the configurations: the suite's surveyed time in one.
        suite_s = sum(history.values()) / max(1, len(job.configs))
        if settings.shard_min_s > 0:
            count = min(count, math.floor(suite_s / settings.shard_min_s))
    if count < 2:
        return [], None
    shards = split.balance(collected, count, history or None)
    if len(shards) < 2:
        return [], None
    how = "the previous job's durations" if history else "test count (no earlier job of this command)"
    progress(f"{collected.tests} tests in {len(shards)} shards, balanced by {how}")
    return shards, f"screened in {len(shards)} shards of tests on separate workers, balanced by {how}"


def previous_durations(session: Session, job: Job) -> dict[str, float]:
    """Test id -> what one round of its configurations cost it in the project's latest
    finished job of the same command (the median per configuration, summed)."""
    previous = survey.previous_job(session, job)
    if previous is None:
        return {}
    rows = session.execute(
        select(TestResult.test_id, JobConfig.label, TestResult.duration_s)
        .join(Run, TestResult.run_id == Run.id)
        .join(JobConfig, Run.config_id == JobConfig.id)
        .where(JobConfig.job_id == previous.id, Run.kind.in_(TEST_HISTORY_KINDS), TestResult.outcome == "passed")
    ).all()
    found: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for test_id, label, duration in rows:
        found[test_id][label].append(duration)
    return {test: sum(statistics.median(values) for values in per.values()) for test, per in found.items()}


def record(session: Session, settings: Settings, job: Job, shards: list[split.Shard]) -> None:
    """One shard row and one screen step per shard (sent once the caller commits)."""
    if job.screen_seed is None:
        # Drawn once for every shard (each would draw its own, and the job keep the last).
        job.screen_seed = secrets.randbits(32)
    for index, shard in enumerate(shards, start=1):
        session.add(
            JobShard(
                job_id=job.id,
                index=index,
                tests=shard.arguments,
                test_count=shard.test_count,
                planned_s=shard.planned_s,
            )
        )
    session.flush()
    for index in range(1, len(shards) + 1):
        ledger.add_task(session, job, settings, SCREEN, task_name(index))


def shard_of(session: Session, task: JobTask) -> JobShard | None:
    if not task.name.startswith(PREFIX):
        return None
    index = int(task.name.removeprefix(PREFIX))
    return session.scalar(select(JobShard).where(JobShard.job_id == task.job_id, JobShard.index == index))


@contextmanager
def only(session: Session, index: int) -> Iterator[None]:
    """While inside: ``session`` loads only shard ``index``'s runs (a configuration's runs
    are its shard's), and every run it stores is that shard's."""

    def loading(state: ORMExecuteState) -> None:
        if state.is_select:
            state.statement = state.statement.options(
                with_loader_criteria(Run, Run.shard == index, include_aliases=True)
            )

    def storing(session: Session, _context: Any, _instances: Any) -> None:
        for instance in session.new:
            if isinstance(instance, Run) and instance.shard is None:
                instance.shard = index

    session.flush()
    event.listen(session, "do_orm_execute", loading)
    event.listen(session, "before_flush", storing)
    # Collections loaded before (every run of the job) must be read again, filtered.
    session.expire_all()
    try:
        yield
    finally:
        session.flush()
        event.remove(session, "do_orm_execute", loading)
        event.remove(session, "before_flush", storing)
        session.expire_all()


class ShardJob:
    """The job as one shard's screen sees it: its command narrowed to the shard's tests, and
    its notes and budget record the shard's own (folded into the job's by ``fold``: two
    shards appending to the job's JSON at once would each write back what it read, and the
    later commit drop the other's lines); everything else (configurations, seed) is the
    job's own."""

    OWN: tuple[str, ...] = ("notes", "budget")

    def __init__(self, job: Job, command: list[str], shard: JobShard):
        object.__setattr__(self, "_job", job)
        object.__setattr__(self, "_shard", shard)
        object.__setattr__(self, "command", command)

    def __getattr__(self, name: str) -> Any:
        owner = "_shard" if name in type(self).OWN else "_job"
        return getattr(object.__getattribute__(self, owner), name)

    def __setattr__(self, name: str, value: Any) -> None:
        owner = "_shard" if name in type(self).OWN else "_job"
        setattr(object.__getattribute__(self, owner), name, value)


class NarrowedJob(ShardJob):
    """The job with its command narrowed to some of its tests (a gate's, for the matrix
    after it: services/jobs/gate.py); everything else, notes and budget too, is the job's."""

    OWN = ()

    def __init__(self, job: Job, command: list[str]):
        super().__init__(job, command, None)  # type: ignore[arg-type]  # no shard: OWN is empty


def narrowed(job: Job, command: list[str]) -> Job:
    return cast(Job, NarrowedJob(job, command))


def shard_job(job: Job, shard: JobShard, workdir: Path) -> Job:
    if shard.notes is None:  # a row not flushed yet has no column default
        shard.notes = []
    return cast(Job, ShardJob(job, split.shard_command(job.command, list(shard.tests), workdir), shard))


def fold(session: Session, job: Job) -> None:
    """The shards' notes, what their budgets left out and the nodes their screens ran on,
    into the job's (by the last shard to finish, under the lock on the job's row; a second
    call adds nothing)."""
    rows = session.scalars(select(JobShard).where(JobShard.job_id == job.id).order_by(JobShard.index)).all()
    notes = list(job.notes)
    for row in rows:
        notes.extend(note for note in row.notes or [] if note not in notes)
    left: dict[str, list[str]] = dict((job.budget or {}).get("left_out") or {})
    for row in rows:
        for what, items in ((row.budget or {}).get("left_out") or {}).items():
            left[what] = list(dict.fromkeys([*left.get(what, []), *items]))
    job.notes = notes
    if left or job.budget is not None:
        job.budget = {**(job.budget or {}), "left_out": left}
    # Where each shard's screen ran (its own node), in place of any earlier fold's.
    places = [entry for entry in job.measured_on or [] if entry.get("shard") is None]
    places += [{**entry, "shard": row.index} for row in rows for entry in row.measured_on or []]
    job.measured_on = places


def base_side(base: BaseSide, job: Job, shard: JobShard) -> BaseSide | None:
    """A pull request's base as one shard sees it: the shard's files and node ids that the
    base commit has (pytest refuses a path or node id it cannot find, and a pull request
    adds tests), read from one collection of the base; None when it has none of them."""
    collected = split.collect(base.executor, job.command, base.workdir, job.timeout_s)
    arguments = [argument for argument in shard.tests if isinstance(collected, str) or _collected(collected, argument)]
    if not arguments:
        note = f"shard {shard.index}: none of its tests is on the base commit, nothing to compare"
        if note not in (shard.notes or []):
            shard.notes = [*(shard.notes or []), note]
        return None
    return dataclasses.replace(base, command=split.shard_command(job.command, arguments, base.workdir))


def _collected(collected: split.Collected, argument: str) -> bool:
    """Whether a shard's file or node id is in ``collected`` (a node id of a file listed by
    count only is given the benefit of the doubt)."""
    file, _, name = argument.partition("::")
    if file not in collected.counts:
        return False
    ids = collected.files.get(file)
    return not name or not ids or argument in ids


def screens_done(session: Session, job: Job) -> bool:
    """Whether every screen step of ``job`` is done (this one's change flushed): under a
    lock on the job's row, so of two shards finishing at once exactly one sees the other
    done and records the finish step."""
    session.execute(select(Job.id).where(Job.id == job.id).with_for_update())
    states = session.scalars(select(JobTask.state).where(JobTask.job_id == job.id, JobTask.step == SCREEN)).all()
    return all(state is TaskState.done for state in states)


def progress_view(session: Session, job: Job) -> list[dict[str, Any]]:
    """Each shard of the job: its tests, its step's state and worker, its runs so far."""
    shards = session.scalars(select(JobShard).where(JobShard.job_id == job.id).order_by(JobShard.index)).all()
    if not shards:
        return []
    tasks = {
        task.name: task
        for task in session.scalars(select(JobTask).where(JobTask.job_id == job.id, JobTask.name.like(PREFIX + "%")))
    }
    runs = dict(
        session.execute(
            select(Run.shard, func.count())
            .join(JobConfig, Run.config_id == JobConfig.id)
            .where(JobConfig.job_id == job.id, Run.shard.is_not(None))
            .group_by(Run.shard)
        ).all()
    )
    view = []
    for shard in shards:
        task = tasks.get(task_name(shard.index))
        view.append(
            {
                "index": shard.index,
                "tests": shard.test_count,
                "planned_s": shard.planned_s,
                "state": task.state.value if task else None,
                "worker": task.worker if task else None,
                "attempts": task.attempts if task else 0,
                "runs": runs.get(shard.index, 0),
            }
        )
    return view


def screening(session: Session, job: Job) -> bool:
    """Whether any screen step of the job is still to finish."""
    return (
        session.scalar(
            select(JobTask.id)
            .where(
                JobTask.job_id == job.id,
                JobTask.step == SCREEN,
                JobTask.state.in_([TaskState.pending, TaskState.running]),
            )
            .limit(1)
        )
        is not None
    )
