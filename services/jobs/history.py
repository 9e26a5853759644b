"""A test's stored runs as a gate's reference: its history.

A gate compares a test's fresh run with the runs earlier jobs stored of it
(services/measure/sequential.py), so the history must measure the same thing: the same
command and configuration, the base branch's code, and the same node class, since a
test's latency depends on the CPU model, on which CPUs the executor may use and on the
runner image (DESIGN.md section 1: the same test took 11.9 s on one machine and 0.025 s
on others).

The runs are the ones that time a test as the matrix does: every survey and timing
run, the focused reruns, and a gate's one run of the whole suite (``RunKind.gate``, repetition 0); never a gate's later
runs, which only the tests outside their history had, nor warm-ups, evidence runs or
disturbed ones. A matrix job's cleared tests have one run per configuration, and a
gate on the branch adds one more each time, so history grows with every job; the
tests a gate sends on to every configuration add their matrix runs. A regression that
lands on the branch so becomes its new normal. Only finished jobs count (a
failed or cancelled job may have stopped mid-way). Newest first, at most
``Thresholds.gate_history_runs`` runs, none from a job that finished more than
``Thresholds.gate_history_max_age_days`` ago: older runs measured code and machines that
may have drifted since, and a test whose history has aged out is measured afresh.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, and_, or_, select
from sqlalchemy.orm import Session

from services.diagnose.change_points import CHUNK
from services.jobs.node_class import NodeClass
from services.models import (
    TEST_HISTORY_KINDS,
    UNTRACED,
    Job,
    JobConfig,
    JobSource,
    JobStatus,
    Run,
    RunKind,
    TestResult,
    utcnow,
)
from services.thresholds import Thresholds


@dataclass
class History:
    """One test's stored runs in one configuration, newest first, and the jobs they came from."""

    durations: list[float] = field(default_factory=list)
    job_ids: list[int] = field(default_factory=list)  # newest first, each once


# The jobs that measure a branch as it is: its pushes and its scheduled matrix jobs. Not a
# rerun (another configuration or one test, asked for from the dashboard or the API), a
# confirmation's A/B runs with a knob turned, or a pull request's head (whose branch may be
# named like the base: a fork's main).
BRANCH_TRIGGERS = ("push", "schedule")


def branch_jobs(branch: str) -> ColumnElement[bool]:
    """The jobs whose runs are ``branch``'s history: its pushes and scheduled matrix jobs,
    by the branch their source names. A job with no branch (an API or dashboard job given
    only a ref) is no branch's history, whatever its ref reads like."""
    return and_(
        JobSource.branch == branch,
        or_(
            Job.trigger.in_(BRANCH_TRIGGERS),
            # Stored before jobs named their trigger: a webhook's push, not a rerun.
            and_(Job.trigger.is_(None), Job.source == "github", Job.parent_id.is_(None)),
        ),
    )


def reference_jobs(
    session: Session,
    *,
    project_id: int,
    command: list[Any],
    branch: str | None,
    node: NodeClass,
    thresholds: Thresholds,
    now: dt.datetime | None = None,
) -> list[int]:
    """The finished jobs of the same command on ``branch`` (its pushes and scheduled
    matrix jobs: ``branch_jobs``; None: jobs without a source, `lagtrace run`'s on this
    machine) on ``node``'s class within the age limit,
    newest first: at most ``gate_history_runs`` of them, since each stored at least one
    run of every test it ran in each configuration (the survey's)."""
    if not node.known:
        return []
    oldest = (now or utcnow()) - dt.timedelta(days=thresholds.gate_history_max_age_days)
    query = (
        select(Job.id, Job.command)
        .outerjoin(JobSource, JobSource.job_id == Job.id)
        .where(
            Job.project_id == project_id,
            Job.status == JobStatus.done,
            Job.finished_at >= oldest,
            branch_jobs(branch) if branch is not None else JobSource.job_id.is_(None),
            Job.cpu_model == node.cpu_model,
            Job.engine_cpus == node.engine_cpus,
            Job.runner_image.is_not_distinct_from(node.runner_image),
        )
        .order_by(Job.finished_at.desc(), Job.id.desc())
    )
    # The command is JSON, which PostgreSQL cannot compare: compared here, newest first.
    same: list[int] = []
    for job_id, stored_command in session.execute(query):
        if stored_command == command:
            same.append(job_id)
            if len(same) >= thresholds.gate_history_runs:
                break
    return same


def stored_runs(
    session: Session,
    *,
    project_id: int,
    command: list[Any],
    branch: str | None,
    node: NodeClass,
    config_label: str,
    test_ids: list[str],
    thresholds: Thresholds,
    now: dt.datetime | None = None,
) -> dict[str, History]:
    """Each test's history in ``config_label`` (tests with none are left out): its passed
    runs' durations, newest first, at most ``gate_history_runs``."""
    jobs = reference_jobs(
        session, project_id=project_id, command=command, branch=branch, node=node, thresholds=thresholds, now=now
    )
    if not jobs or not test_ids:
        return {}
    order = {job_id: position for position, job_id in enumerate(jobs)}
    rows: list[tuple[int, int, str, float]] = []
    tests = sorted(set(test_ids))
    for start in range(0, len(tests), CHUNK):
        rows += [
            (job_id, run_id, test_id, duration)
            for job_id, run_id, test_id, duration in session.execute(
                select(JobConfig.job_id, Run.id, TestResult.test_id, TestResult.duration_s)
                .select_from(TestResult)
                .join(Run, Run.id == TestResult.run_id)
                .join(JobConfig, JobConfig.id == Run.config_id)
                .where(
                    JobConfig.job_id.in_(jobs),
                    JobConfig.label == config_label,
                    TestResult.test_id.in_(tests[start : start + CHUNK]),
                    # The survey's run of every test and the focused reruns, and a gate's
                    # one run of the whole suite; never a gate's later runs (only the tests
                    # outside their history had them), a warm-up, an evidence run (a tracer
                    # slows it) or a disturbed run.
                    or_(Run.kind.in_(TEST_HISTORY_KINDS), and_(Run.kind == RunKind.gate, Run.repetition == 0)),
                    # A failing test's duration is its failure's, not its latency.
                    TestResult.outcome == "passed",
                    # The census's survey run: its tracer's time is in every duration.
                    UNTRACED,
                )
            )
        ]
    # Newest job first, and within a job its last run first.
    rows.sort(key=lambda row: (order[row[0]], -row[1]))
    histories: dict[str, History] = defaultdict(History)
    for job_id, _run_id, test_id, duration in rows:
        history = histories[test_id]
        if len(history.durations) >= thresholds.gate_history_runs:
            continue
        history.durations.append(duration)
        if not history.job_ids or history.job_ids[-1] != job_id:
            history.job_ids.append(job_id)
    return dict(histories)


def calibrations(session: Session, jobs: list[int], config_label: str) -> History:
    """Each job's calibration in ``config_label`` (the least CPU time, user and system, of
    its runs of the loop: services/jobs/gate.py CALIBRATION_RUNS) in ``jobs``
    (reference_jobs), newest first: what the node took when the history was measured."""
    if not jobs:
        return History()
    order = {job_id: position for position, job_id in enumerate(jobs)}
    rows = sorted(
        session.execute(
            select(JobConfig.job_id, Run.user_s + Run.sys_s)
            .join(Run, Run.config_id == JobConfig.id)
            .where(
                JobConfig.job_id.in_(jobs),
                JobConfig.label == config_label,
                Run.kind == RunKind.calibration,
                Run.exit_code == 0,
                Run.timed_out.is_(False),
            )
        ).all(),
        key=lambda row: order[row[0]],
    )
    least: dict[int, float] = {}
    for job_id, cpu_s in rows:
        least[job_id] = min(cpu_s, least.get(job_id, cpu_s))
    return History(durations=list(least.values()), job_ids=list(least))
