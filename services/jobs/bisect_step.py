"""A bisect job's one ledger step: fetch the history, resolve the two revisions, search.

The job is stored by services/jobs/bisect_jobs.py; this step runs under a lease as every
step does (services/jobs/lease.py ``run_step``), and in one attempt it

1. fetches the project's repository with the history of its branches and tags (a step's
   usual checkout is one commit deep: services/jobs/sources.py ``checkout_history``),
   resolves ``good`` and ``bad`` (an unknown one fails the job, naming it) and takes the
   commits between them along the first-parent line;
2. reads the command from .lagtrace.yml at the bad end when the request gave none;
3. under the node's measurement lock, as a screen holds it (services/jobs/workspace.py
   ``node_slot``), runs the search (services/jobs/bisect.py) with the job's executor,
   each commit it picks checked out once into a worktree (services/jobs/bisect_checkouts.py),
   every run stored in the job's one configuration with its commit, and a checkpoint after
   each run: the run is committed, and a cancel stops the search there;
4. stores the result on the job's Bisect row, and the job is done.

The budget is the job's ``budget_s`` (the runs' wall time), as for any job.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy.orm import Session

from services.errors import BadInput
from services.jobs import ledger, lifecycle, sources
from services.jobs.bisect import BisectResult, Budget, bisect
from services.jobs.bisect_checkouts import Checkouts, first_parent_range
from services.jobs.engine import JobCancelled, stop_if_cancelled
from services.jobs.node_class import NodeClass
from services.jobs.spec import enforce_policy
from services.jobs.workspace import Checkpoint, executor_for, node_slot, progress_of, stored_source
from services.measure import pytest_command
from services.measure.configs import cpu_config, cpus_touched, parse_spec
from services.measure.confirm import rule_of
from services.models import Bisect, Job, JobConfig, JobSource, JobStatus, JobTask, TaskState
from services.settings import Settings


def bisect_step(session: Session, settings: Settings, task: JobTask) -> None:
    job, source = task.job, stored_source(session, task.job)
    wanted = session.get(Bisect, job.id)
    if job.status not in (JobStatus.queued, JobStatus.running) or wanted is None or not job.configs:
        task.state = TaskState.cancelled if job.status is JobStatus.cancelled else TaskState.done
        return
    [config] = job.configs
    # A step taken again after its worker died starts the search over: the runs the dead
    # attempt stored are deleted first, so the result counts each run once and only the
    # runs its own search judged (the screen drops a dead attempt's runs the same way).
    for run in list(config.runs):
        session.delete(run)
    wanted.result = None
    lifecycle.mark_running(job)
    checkpoint = stop_if_cancelled(session, job, task)
    try:
        checkpoint()
        result = _search(session, settings, job, source, wanted, config, checkpoint)
    except JobCancelled:
        task.state = TaskState.cancelled
        return
    except (BadInput, sources.SourceError) as exc:
        # Bad input found only on the fetched history (an unknown revision, good not an
        # ancestor of bad, a command or configuration the worker refuses): the job fails
        # saying which (tests/api/test_bisects.py).
        lifecycle.fail_job(session, settings, job, task, str(exc))
        return
    wanted.result = result
    lifecycle.finish(session, settings, job)
    task.state = TaskState.done


def _search(
    session: Session,
    settings: Settings,
    job: Job,
    source: JobSource,
    wanted: Bisect,
    config: JobConfig,
    checkpoint: Checkpoint,
) -> dict:
    progress = progress_of(job)
    directory = sources.checkout_history(source, settings, f"bisect-{wanted.job_id}")
    trees = None
    try:
        git = sources.git_in(settings)
        wanted.good_sha = sources.resolve_commit(settings, directory, wanted.good, "good")
        wanted.bad_sha = sources.resolve_commit(settings, directory, wanted.bad, "bad")
        commits = first_parent_range(
            git, directory, wanted.good_sha, wanted.bad_sha, (f"good {wanted.good}", f"bad {wanted.bad}")
        )
        source.commit_sha = wanted.bad_sha
        if source.github_repository and not source.github_head_sha:
            source.github_head_sha = wanted.bad_sha  # its check run goes on the bad commit
            ledger.notify_step(session, job, settings)  # in progress there from now on
        if source.from_repository_config and not job.command:
            spec = enforce_policy(sources.config_in_history(settings, directory, wanted.bad_sha), settings, job.project)
            job.command, job.timeout_s, source.image = spec.command, spec.timeout_s, source.image or spec.image
            job.executor = job.executor if job.executor != "auto" else spec.executor
        if wanted.test_id is not None and not pytest_command.is_pytest(job.command):
            raise BadInput(
                f"command {job.command[0]!r}: a test is timed in a pytest command; leave test out to time the "
                "whole command",
                field="command",
            )
        job.timeout_s = lifecycle.run_timeout(settings, job.timeout_s)
        executor = executor_for(job, source, settings)
        job.executor = executor.name
        try:
            parse_spec(config.label, executor.available_cpus(), machine="this worker")
        except BadInput as exc:
            raise BadInput(f"config: {exc}", field="config") from None
        if config.cpus is not None and (problem := executor.quota_unsupported_reason()):
            raise BadInput(f"config {config.label}: CPU quotas cannot be enforced on this worker: {problem}")
        what = wanted.test_id or "the command"
        progress(f"bisect {what} in {config.label}: {len(commits)} commits, {commits[0][:10]}..{commits[-1][:10]}")
        checkpoint()
        with node_slot(settings, job, "bisect", cpus_touched([cpu_config(config)]), progress):
            NodeClass.of_executor(executor).record(job)
            checkpoint()
            # The worktrees live in the work dir, as every checkout does (the docker
            # executor's containers mount them from there), removed with it.
            trees = sources.new_checkout_directory(settings, f"{job.id}-bisect-trees")
            with Checkouts(
                session,
                config,
                directory,
                "",
                executor,
                list(job.command),
                wanted.test_id,
                job.timeout_s,
                progress,
                scratch=trees,
                git=git,
                after_run=checkpoint,
            ) as checkouts:
                found = bisect(
                    commits,
                    checkouts.measure,
                    rule_of(settings.thresholds),
                    Budget(max_s=job.budget_s),
                    config=config.label,
                    timed="the test" if wanted.test_id else "the command",
                    progress=progress,
                )
            return _with_subjects(found, lambda sha: git(directory, "log", "-1", "--format=%s", sha))
    finally:
        if trees is not None:
            sources.remove(trees)
        sources.remove(directory)


def _with_subjects(result: BisectResult, subject: Callable[[str], str]) -> dict:
    """The result as `lagtrace bisect --json` writes it, with the culprit's subject line
    (the dashboard names the commit by it; the checkout is gone once the step ends)."""
    found = result.as_json()
    found["culprit_subject"] = subject(result.culprit_sha) if result.culprit_sha else None
    return found
