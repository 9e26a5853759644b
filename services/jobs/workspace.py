"""A step's workspace: a fresh checkout of the job's code and its executor, prepared under
the node's measurement lock (and a pull request's base commit beside it)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from pathlib import Path

from sqlalchemy.orm import Session

from services.errors import BadInput
from services.jobs import pull_requests, sources
from services.measure import nodelock
from services.measure.configs import cpu_config, cpus_touched
from services.measure.executors import Executor, make_executor
from services.measure.screen import BaseSide
from services.measure.shards import on_worker_cpus
from services.models import Job, JobKind, JobShard, JobSource
from services.settings import Settings

log = logging.getLogger("lagtrace.engine")

Progress = Callable[[str], None]
Checkpoint = Callable[[], None]


def progress_of(job: Job) -> Progress:
    return lambda line: log.info("job %s: %s", job.id, line)


def _quiet(message: str) -> None:
    pass


# The node's measurement lock, as each phase of a job holds it (services/measure/nodelock.py).


@contextmanager
def node_slot(
    settings: Settings, held_by: Job | JobShard, phase: str, cpuset: tuple[int, ...] | None, progress: Progress = _quiet
) -> Iterator[None]:
    """The node's measurement lock for ``phase``, recorded on the job (or on the shard whose
    screen holds it, folded into the job's by shards.fold): the report names the node and
    the lock each phase held (a drill may run on another node than its screen)."""
    with nodelock.measurement_slot(settings, cpuset, progress) as held:
        others = [entry for entry in held_by.measured_on or [] if entry.get("phase") != phase]
        held_by.measured_on = [*others, {"phase": phase, **held.as_dict()}]
        yield


def screen_lock(
    settings: Settings, job: Job, progress: Progress = _quiet, shard: JobShard | None = None
) -> AbstractContextManager[None]:
    """The node's measurement lock for a whole screen (with packing: the CPUs its configurations use)."""
    return node_slot(settings, shard or job, "screen", cpus_touched([cpu_config(c) for c in job.configs]), progress)


def drill_lock(settings: Settings, job: Job, progress: Progress = _quiet) -> AbstractContextManager[None]:
    """Evidence runs use the slowest and the fastest configuration: the whole node."""
    return node_slot(settings, job, "drill", None, progress)


def cache_scope(job: Job, source: JobSource) -> str:
    """Where the docker executor keeps the job's prepared dependency images: one scope per
    project for its own commits, and one per pull request for a fork's, which no other job
    reads. A fork's install runs the fork's code (setup.py, a build backend): were it
    cached where the default branch's jobs look, a fork could plant a ``sitecustomize.py``
    or a ``bin/strace`` in the image they measure in, as GitHub Actions keeps a fork's
    caches from the base branch (docs.github.com, "Restrictions for accessing a cache";
    tests/security/test_prepare.py)."""
    scope = f"project-{job.project_id}"
    if source.config_commit_sha is not None:  # a fork's pull request (services/github/webhooks.py)
        scope += f"-fork-pr{source.pull_request_number if source.pull_request_number is not None else f'-job{job.id}'}"
    return scope


def executor_for(job: Job, source: JobSource, settings: Settings) -> Executor:
    # After prepare, job.executor is the one `auto` chose there, not `auto` again.
    executor = make_executor(
        job.executor,
        settings,
        image=source.image,
        progress=progress_of(job),
        allowed=settings.allowed_executors,
        cache_scope=cache_scope(job, source),
        job_id=job.id,
    )
    return on_worker_cpus(executor, settings.worker_cpus)


@contextmanager
def checkout(
    settings: Settings,
    job: Job,
    source: JobSource,
    name: str,
    lock: Callable[[], AbstractContextManager[None]],
    checkpoint: Checkpoint,
    commit: str | None = None,
) -> Iterator[tuple[Executor, Path]]:
    """A fresh checkout of the job's code (``commit``: another commit of its repository) and
    its executor, held under the node's measurement lock."""
    directory, _ = sources.checkout(source, settings, name, commit=commit)
    try:
        executor = executor_for(job, source, settings)
        with lock():
            checkpoint()  # the job may have been cancelled while this waited for the node
            # Inside the lock: installing dependencies (cached per node) burns CPU that
            # would disturb a run being measured beside it.
            executor.prepare(directory, progress_of(job))
            yield executor, directory
    finally:
        sources.remove(directory)


@contextmanager
def base_side(
    settings: Settings, job: Job, source: JobSource, name: str, checkpoint: Checkpoint
) -> Iterator[BaseSide | None]:
    """A pull request's base commit, checked out and prepared beside the head (inside the
    head's measurement lock already); None for other jobs, or when the base cannot be
    fetched (the head is still screened, and the report says why there is no comparison)."""
    # A gate compares the head with the base branch's stored runs, not with a fresh
    # screen of the base commit (services/jobs/gate.py).
    if not source.base_commit_sha or job.kind is JobKind.gate:
        yield None
        return
    with ExitStack() as stack:
        base: BaseSide | None = None
        try:
            executor, directory = stack.enter_context(
                checkout(settings, job, source, name, nullcontext, checkpoint, commit=source.base_commit_sha)
            )
        except (BadInput, sources.SourceError) as exc:
            job.notes = [*job.notes, f"the base commit {source.base_commit_sha[:12]} could not be prepared: {exc}"]
        else:

            def needs_runs(labels: list[str]) -> list[str]:
                return [label for label in pull_requests.needs_runs(job, settings.thresholds) if label in labels]

            base = BaseSide(directory, executor, needs_runs)
        yield base


def stored_source(session: Session, job: Job) -> JobSource:
    source = session.get(JobSource, job.id)
    if source is None:
        raise BadInput(f"job {job.id} has no stored source: it was run with `lagtrace run`")
    return source
