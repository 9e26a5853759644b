"""A regression's cause: each test a pull request's job found regressed, profiled in the
configuration that showed it on the head and on the base commit, so that hot_path names
the frames whose time grew between the two commits (services/diagnose/hot_path.py).

The drill compares configurations of one commit; a regression is a comparison of commits
in one configuration, and the base's checkout is taken here once for its profiles (a
gate judges against the base branch's history and has no base checkout of its own).
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

from sqlalchemy.orm import Session

from services.errors import BadInput
from services.jobs import gate, pull_requests, sources
from services.jobs.report_schema import judged_runs
from services.jobs.workspace import Checkpoint, Progress, checkout
from services.measure.artifacts import make_artifact_store
from services.measure.drill import Side, profile_commits
from services.measure.executors import Executor
from services.measure.stats import Summary, median_interval
from services.models import Job, JobKind, JobSource
from services.settings import Settings
from services.thresholds import Thresholds

PROBE = "pyspy"


def regressed(job: Job, thresholds: Thresholds) -> list[tuple[str, Summary, str]]:
    """Each test the job found regressed against its base (its id, its head's summary, the
    configuration that showed it), the largest ratio first: a gate's verdicts against the
    base branch's history, or the comparison with the base commit screened beside it."""
    found: list[tuple[float, str, Summary, str]] = []
    if job.kind is JobKind.gate:
        judged = gate.stored_gate(job)
        if judged is not None:
            for test in judged.tests:
                if test.verdict == gate.REGRESSED and test.ratio is not None and test.fresh_s:
                    found.append((test.ratio, test.test, median_interval(judged_runs(test.fresh_s)), judged.config))
    else:
        for change in pull_requests.changes_of(job, thresholds):
            if change.verdict == pull_requests.REGRESSED and change.test_id is not None:
                found.append((change.ratio or 0.0, change.test_id, change.head, change.config))
    found.sort(key=lambda entry: -entry[0])
    tests: dict[str, tuple[str, Summary, str]] = {}
    for _, test_id, summary, config in found:
        tests.setdefault(test_id, (test_id, summary, config))  # its largest regression
    return list(tests.values())[: thresholds.regression_profile_max_tests]


def profile_phase(
    session: Session,
    settings: Settings,
    job: Job,
    source: JobSource,
    executor: Executor,
    *,
    workdir: Path,
    progress: Progress,
    checkpoint: Checkpoint,
) -> int:
    """Profile each regressed test on the head (``executor``, ``workdir``) and on the base
    commit, checked out here; how many runs that took. Nothing without a base commit, or
    where py-spy was not among the evidence asked for."""
    if not source.base_commit_sha or job.probes == [] or (job.probes is not None and PROBE not in job.probes):
        return 0
    tests = regressed(job, settings.thresholds)
    if not tests:
        return 0
    base_commit = source.base_commit_sha
    try:
        # Inside the head's measurement lock already (the finish step's checkout holds it).
        with checkout(settings, job, source, f"base-profile-{job.id}", nullcontext, checkpoint, commit=base_commit) as (
            base_executor,
            base_dir,
        ):
            sides = [Side("head", executor, workdir), Side("base", base_executor, base_dir)]
            store = make_artifact_store(settings)
            count = profile_commits(
                session, job, settings.thresholds, store, tests, sides, progress=progress, checkpoint=checkpoint
            )
    except (BadInput, sources.SourceError) as exc:
        job.notes = [*job.notes, f"the base commit {base_commit[:12]} could not be profiled: {exc}"]
        return 0
    progress(f"profiled {len(tests)} regressed tests on the head and the base commit {base_commit[:12]}")
    return count
