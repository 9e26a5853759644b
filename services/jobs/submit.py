"""Service jobs: submit, rerun, and what the API shows of them.

Functions take the Session first and do not commit; the steps they record are sent
once the caller commits (services.jobs.outbox).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session, selectinload

from services.diagnose import change_points
from services.diagnose.metrics import SlowerSinceMetrics, metrics_of
from services.diagnose.report_parts import ReportFinding
from services.errors import BadInput, Conflict, NotFound
from services.jobs import archives, bisect_jobs, forecast, shards, summaries, workers
from services.jobs.dispatch import BISECT, PREPARE, SCREEN
from services.jobs.ledger import add_task
from services.jobs.lifecycle import FINISHED, create_job, run_timeout
from services.jobs.report import build_report
from services.jobs.report_schema import Report, report_json
from services.jobs.sources import SHA, check_archive, check_ref, check_repository_url
from services.jobs.spec import JobSpec, enforce_policy
from services.measure.configs import CpuConfig, parse_spec
from services.measure.executors import EXECUTORS
from services.measure.pytest_command import narrow_to_test
from services.models import (
    COMMAND_KINDS,
    Finding,
    Job,
    JobConfig,
    JobKind,
    JobSource,
    JobStatus,
    JobTask,
    Project,
    Run,
    RunKind,
    TaskState,
    TestResult,
)
from services.settings import Settings
from services.thresholds import Thresholds


def _check_spec(spec: JobSpec, settings: Settings) -> list[CpuConfig]:
    """What can be checked without the worker's machine: the configurations against the CPUs
    the service takes the nodes to have (Settings.node_cpus); the worker checks them again
    against its own, with the engine, at prepare."""
    if spec.executor not in EXECUTORS:
        raise BadInput(f"executor: unknown executor {spec.executor!r} (known: {', '.join(EXECUTORS)})")
    if spec.image and spec.executor == "local":
        raise BadInput("image: applies to the docker executor only (executor docker or auto)")
    cpus = settings.node_cpu_count
    configs = []
    for index, label in enumerate(spec.configs):
        try:
            configs.append(parse_spec(label, tuple(range(cpus)), machine="the nodes"))
        except BadInput as exc:
            raise BadInput(f"configs.{index}: {exc} (LAGTRACE_NODE_CPUS={cpus})", field=f"configs.{index}") from None
    return configs


def submit_job(
    session: Session,
    settings: Settings,
    project: Project,
    spec: JobSpec | None,
    *,
    repository_url: str | None = None,
    ref: str | None = None,
    commit_sha: str | None = None,
    archive: bytes | None = None,
    origin: str = "api",
    github_repository: str | None = None,
    config_commit_sha: str | None = None,
    trigger: str | None = None,
    branch: str | None = None,
    pull_request: PullRequestRef | None = None,
    pushed: PushedRange | None = None,
) -> Job:
    """Store a queued job and its source. ``spec`` None: read it from .lagtrace.yml at prepare
    (at ``config_commit_sha`` when given: a fork's pull request runs its base branch's config).
    ``pull_request``: the head is screened against its base commit (services/jobs/pull_requests.py)."""
    if (repository_url is None) == (archive is None):
        raise BadInput("give exactly one of repository.url and an uploaded archive", field="repository")
    if repository_url is not None:
        check_repository_url(repository_url, settings)
        if ref is not None:
            check_ref(ref)
    elif archive is not None:
        check_archive(archive, settings)
        archives.make_room(session, settings, project, len(archive))
    configs = _check_spec(spec, settings) if spec else []
    if spec is not None:
        spec = enforce_policy(spec, settings, project)
    if spec is not None:
        run_timeout(settings, spec.timeout_s)
    job = create_job(
        session,
        project=project.name,
        command=spec.command if spec else [],
        configs=configs,
        executor=spec.executor if spec else "auto",
        workdir=None,
        repeat=spec.repeat if spec else 1,
        timeout_s=spec.timeout_s if spec else None,
        source=origin,
        probes=spec.evidence if spec else None,
        stall_after_s=spec.stall_after_s if spec else None,
        budget_s=spec.budget_s if spec else None,
        kind=JobKind(spec.kind) if spec else JobKind.matrix,
    )
    job.trigger = trigger or TRIGGERS.get(origin, origin)
    if pull_request is not None and pull_request.base_commit_sha is not None:
        check_commit(pull_request.base_commit_sha)
    session.add(
        JobSource(
            job_id=job.id,
            kind="git" if repository_url else "archive",
            repository_url=repository_url,
            ref=ref,
            commit_sha=commit_sha,
            archive=archive,
            from_repository_config=spec is None,
            image=spec.image if spec else None,
            github_repository=github_repository,
            github_head_sha=commit_sha,
            config_commit_sha=config_commit_sha,
            branch=branch,
            base_ref=pull_request.base_ref if pull_request else None,
            base_commit_sha=pull_request.base_commit_sha if pull_request else None,
            pull_request_number=pull_request.number if pull_request else None,
            pull_request_url=pull_request.url if pull_request else None,
            before_commit_sha=pushed.before_sha if pushed else None,
            pushed_commits=pushed.commits if pushed else None,
        )
    )
    session.flush()
    add_task(session, job, settings, PREPARE)
    return job


# What started a job, by the entry point that stored it (a GitHub delivery names its event).
TRIGGERS = {"api": "api", "web": "dashboard", "cli": "cli", "github": "push", "schedule": "schedule"}


@dataclass(frozen=True)
class PullRequestRef:
    number: int
    url: str | None
    base_ref: str | None
    base_commit_sha: str | None


@dataclass(frozen=True)
class PushedRange:
    """What a push brought: its branch's commit before it, and how many commits it added."""

    before_sha: str
    commits: int


def check_commit(sha: str) -> str:
    if not SHA.match(sha):
        raise BadInput(f"base commit {sha!r}: not a commit id")
    return sha


def trigger_of(job: Job) -> str:
    """push, pull_request, api, dashboard, rerun, confirm, schedule or cli (jobs stored before triggers
    were: from their source)."""
    return job.trigger or ("rerun" if job.parent_id else TRIGGERS.get(job.source, job.source))


def _rerun_command(session: Session, parent: Job, test_id: str | None) -> list[str]:
    """The parent's command, or for one test the pytest command narrowed to its node id."""
    if test_id is None:
        return parent.command
    ran = session.scalar(
        select(func.count())
        .select_from(TestResult)
        .join(Run)
        .join(JobConfig)
        .where(JobConfig.job_id == parent.id, TestResult.test_id == test_id)
    )
    if not ran:
        raise BadInput(f"test: {test_id!r} did not run in job {parent.id}")
    # The rerun is planned before its checkout exists.
    return narrow_to_test(parent.command, test_id, None)


def rerun_job(
    session: Session,
    settings: Settings,
    parent: Job,
    *,
    configs: list[str],
    repeat: int | None = None,
    timeout_s: float | None = None,
    origin: str = "api",
    test_id: str | None = None,
) -> Job:
    """A new job on the parent's code (its resolved commit) under other configurations,
    for the whole command or (``test_id``) one of its tests."""
    job = job_on_source_of(
        session, settings, parent, configs=configs, repeat=repeat, timeout_s=timeout_s, origin=origin, test_id=test_id
    )
    job.parent_id = parent.id
    job.trigger = "rerun"
    return job


def job_on_source_of(
    session: Session,
    settings: Settings,
    earlier: Job,
    *,
    configs: list[str],
    repeat: int | None = None,
    timeout_s: float | None = None,
    origin: str,
    test_id: str | None = None,
) -> Job:
    """A queued matrix job of ``earlier``'s command and settings on its source (the same
    resolved commit, branch and check-run policy), under ``configs`` (empty: its own).
    A rerun (above) and a scheduled matrix job (services/jobs/schedule.py) are both this;
    the caller says which (trigger, parent)."""
    source = session.get(JobSource, earlier.id)
    if source is None:
        raise Conflict(f"job {earlier.id} was run with `lagtrace run`, not through the service: rerun it there")
    if earlier.kind is JobKind.bisect:
        raise Conflict(f"job {earlier.id} is a bisect: ask for another bisect (POST /api/v1/bisects)")
    # Read before room is made: the room may be the earlier job's own archive.
    archive = source.archive
    if source.kind == "archive":
        if archive is None:
            raise Conflict(f"job {earlier.id}: {archives.DROPPED}")
        archives.make_room(session, settings, earlier.project, len(archive))
    if not earlier.command:
        raise Conflict(f"job {earlier.id} has not read its .lagtrace.yml yet: rerun it once it is running")
    spec = JobSpec(
        command=_rerun_command(session, earlier, test_id),
        configs=configs or [c.label for c in earlier.configs],
        repeat=repeat or earlier.repeat,
        timeout_s=timeout_s or earlier.timeout_s,
        evidence=earlier.probes,
        stall_after_s=earlier.stall_after_s,
        budget_s=earlier.budget_s,
        executor=earlier.executor,
        image=source.image,
    )
    spec = enforce_policy(spec, settings, earlier.project)
    run_timeout(settings, spec.timeout_s)
    job = create_job(
        session,
        project=earlier.project.name,
        command=spec.command,
        configs=_check_spec(spec, settings),
        executor=spec.executor,
        workdir=None,
        repeat=spec.repeat,
        timeout_s=spec.timeout_s,
        source=origin,
        probes=spec.evidence,
        stall_after_s=spec.stall_after_s,
        budget_s=spec.budget_s,
        kind=JobKind.matrix,
    )
    session.add(
        JobSource(
            job_id=job.id,
            kind=source.kind,
            repository_url=source.repository_url,
            ref=source.ref,
            commit_sha=source.commit_sha,
            archive=archive,
            image=source.image,
            github_repository=source.github_repository,
            github_head_sha=source.github_head_sha,
            config_commit_sha=source.config_commit_sha,
            # A pull request's rerun is compared with the same base, and fails on the same policy.
            branch=source.branch,
            base_ref=source.base_ref,
            base_commit_sha=source.base_commit_sha,
            pull_request_number=source.pull_request_number,
            pull_request_url=source.pull_request_url,
            fail_on=source.fail_on,
        )
    )
    session.flush()
    add_task(session, job, settings, PREPARE)
    return job


def confirm_slower_since(session: Session, settings: Settings, finding: Finding, *, origin: str = "web") -> Job:
    """A ``slower_since`` finding's suspicion put to the pull-request screen: its last fast
    commit as the base and its first slow commit as the head, run interleaved on one node,
    its test alone in its configuration; the job's verdict is the base comparison's
    (regressed, unchanged, ...). The branch's history compared jobs run on different days,
    perhaps on different machines; this compares the two commits under the same conditions."""
    if finding.kind != change_points.KIND:
        raise BadInput(f"finding {finding.id} is {finding.kind}, not {change_points.KIND}: nothing to confirm")
    # A stored shape the model does not read names no commits: refused below, as before.
    stored = metrics_of(finding.kind, finding.metrics)
    step = stored if isinstance(stored, SlowerSinceMetrics) else None
    first_slow = step.first_slow.commit if step is not None else None
    last_fast = step.last_fast.commit if step is not None else None
    if not first_slow or not last_fast:
        raise Conflict(
            f"finding {finding.id} does not name both commits (jobs of uploaded archives): nothing to check out"
        )
    culprit = finding.job
    source = session.get(JobSource, culprit.id)
    if source is None or source.kind != "git" or not source.repository_url:
        raise Conflict(f"job {culprit.id} was not run from a git repository: its commits cannot be checked out")
    spec = JobSpec(
        command=_rerun_command(session, culprit, finding.test_id),
        configs=[finding.config_label] if finding.config_label else [c.label for c in culprit.configs],
        repeat=culprit.repeat,
        timeout_s=culprit.timeout_s,
        evidence=[],  # a verdict, not a diagnosis: no drill
        executor=culprit.executor,
        image=source.image,
    )
    branch = str((step.branch if step is not None else None) or source.branch or "") or None
    job = submit_job(
        session,
        settings,
        culprit.project,
        spec,
        repository_url=source.repository_url,
        ref=source.ref,  # fetched when the server serves no bare commit; the commit wins
        commit_sha=check_commit(first_slow),
        origin=origin,
        trigger="confirm",
        branch=branch,
        pull_request=PullRequestRef(number=0, url=None, base_ref=branch, base_commit_sha=last_fast),
    )
    job.parent_id = culprit.id
    # Not a pull request: no number, and no check run posted on the old commit.
    job_source = session.get(JobSource, job.id)
    if job_source is not None:
        job_source.pull_request_number = None
        job_source.github_head_sha = None
    session.flush()
    return job


def get_job(session: Session, project: Project, job_id: int) -> Job:
    job = session.get(Job, job_id)
    if job is None or job.project_id != project.id:
        raise NotFound(f"job {job_id} does not exist in project {project.name}")
    return job


# What a job's summary shows of its row: the API's job list reads these columns, not
# whole jobs (with their configurations and project) as objects.
SUMMARY_COLUMNS = (
    Job.id,
    Job.parent_id,
    Job.status,
    Job.source,
    Job.kind,
    Job.trigger,
    Job.command,
    Job.executor,
    Job.repeat,
    Job.timeout_s,
    Job.probes,
    Job.stall_after_s,
    Job.budget_s,
    Job.error,
    Job.created_at,
    Job.started_at,
    Job.finished_at,
)


def list_job_summaries(
    session: Session, project: Project, *, status: str | None, limit: int, before_id: int | None
) -> list[dict[str, Any]]:
    """A page of the project's jobs, newest first, each as job_summary shows it: their
    columns, configurations' labels and sources in three queries, no job object."""
    query = select(*SUMMARY_COLUMNS).where(Job.project_id == project.id).order_by(Job.id.desc()).limit(limit)
    if status:
        query = query.where(Job.status == JobStatus(status))
    if before_id:
        query = query.where(Job.id < before_id)
    rows = session.execute(query).all()
    if not rows:
        return []
    ids = [row.id for row in rows]
    labels: dict[int, list[str]] = {job_id: [] for job_id in ids}
    for job_id, label in session.execute(
        select(JobConfig.job_id, JobConfig.label)
        .where(JobConfig.job_id.in_(ids))
        .order_by(JobConfig.job_id, JobConfig.position)
    ):
        labels[job_id].append(label)
    # Most jobs have no source row.
    sources = {s.job_id: s for s in session.scalars(select(JobSource).where(JobSource.job_id.in_(ids)))}
    return [_summary(row, project.name, labels[row.id], sources.get(row.id)) for row in rows]


def progress(session: Session, job: Job, settings: Settings | None = None) -> dict[str, Any]:
    # One screen step measures every configuration: its state and worker (the newest's)
    # are theirs; and the prepare step's state. Both in one query. With ``settings``, a
    # step whose worker's heartbeat lapsed reads "worker lost", and "warning" says so, or
    # that no worker is alive to take the job (services/jobs/workers.py).
    screen: JobTask | None = None
    prepare: TaskState | None = None
    for task in session.scalars(
        select(JobTask)
        .where(JobTask.job_id == job.id, or_(JobTask.step.in_((SCREEN, BISECT)), JobTask.name == PREPARE))
        .order_by(JobTask.id)
    ):
        # A bisect's one step measures its one configuration, as a screen does.
        if task.step in (SCREEN, BISECT):
            screen = task
        if task.name == PREPARE:
            prepare = task.state
    done_runs = dict(
        session.execute(
            select(Run.config_id, func.count())
            .where(
                Run.config_id.in_([c.id for c in job.configs]),
                Run.kind.in_((*COMMAND_KINDS, RunKind.focus, RunKind.bisect)),
            )
            .group_by(Run.config_id)
        ).all()
    )
    liveness = workers.of_job(session, settings, job) if settings is not None and job.status not in FINISHED else None
    lost = {task.name for task in liveness.lost} if liveness else set()

    def state_of(task: JobTask | None) -> str | None:
        if task is None:
            return None
        return "worker lost" if task.name in lost else task.state.value

    configs = [
        {
            "label": c.label,
            "runs": done_runs.get(c.id, 0),
            "state": state_of(screen),
            "worker": screen.worker if screen else None,
        }
        for c in job.configs
    ]
    shard_view = shards.progress_view(session, job)
    for shard in shard_view:
        if shards.task_name(shard["index"]) in lost:
            shard["state"] = "worker lost"
    # The plan is --repeat runs a configuration, and grows with the runs the screen adds
    # (the survey's, a pull request's comparison, an undecided pair's, each shard's): a
    # configuration is never shown past its plan ("21/15").
    planned = sum(max(job.repeat, done_runs.get(c.id, 0)) for c in job.configs)
    runs = sum(done_runs.values())
    if job.status in FINISHED:
        phase = job.status.value
    elif job.status is JobStatus.queued:
        phase = "preparing" if prepare is TaskState.running else "queued"
    elif job.kind is JobKind.bisect:
        phase = "bisecting"
    elif screen is not None and screen.state is TaskState.done and not shards.screening(session, job):
        phase = "diagnosing"
    else:
        phase = "screening"
    return {
        "phase": phase,
        "runs_done": runs,
        "runs_planned": planned,
        # Early stopping can finish a configuration before `repeat` runs.
        "fraction": 1.0 if job.status is JobStatus.done else (round(runs / planned, 3) if planned else 0.0),
        "configs": configs,
        # A job split across workers (services/jobs/shards.py): each shard's step.
        "shards": shard_view,
        "warning": liveness.warning() if liveness else None,
        "workers_lost": liveness.lost_view(settings) if liveness and settings is not None else [],
        "workers_live": liveness.live_workers if liveness else None,
    }


def job_summary(session: Session, job: Job) -> dict[str, Any]:
    return _summary(job, job.project.name, [c.label for c in job.configs], session.get(JobSource, job.id))


def _summary(job: Any, project: str, configs: list[str], source: JobSource | None) -> dict[str, Any]:
    """``job``: a Job, or a row of its SUMMARY_COLUMNS (list_job_summaries)."""
    return {
        "id": job.id,
        "project": project,
        "status": job.status.value,
        "source": job.source,
        # Jobs stored before kinds existed were all matrices (the column's server default).
        "kind": job.kind.value,
        "parent_id": job.parent_id,
        "command": job.command,
        "executor": job.executor,
        "repeat": job.repeat,
        "timeout_s": job.timeout_s,
        "configs": configs,
        "error": job.error,
        "created_at": job.created_at.isoformat(),
        "started_at": job.started_at.isoformat() if job.started_at else None,
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
        "trigger": trigger_of(job),
        "branch": source.branch if source else None,
        "commit": (source.commit_sha or source.github_head_sha) if source else None,
        "pull_request": (
            {
                "number": source.pull_request_number,
                "url": source.pull_request_url,
                "base_ref": source.base_ref,
                "base_commit": source.base_commit_sha,
            }
            if source and source.pull_request_number is not None
            else None
        ),
        "repository": (
            {"url": source.repository_url, "ref": source.ref, "commit": source.commit_sha}
            if source and source.kind == "git"
            else None
        ),
        "archive": bool(source and source.kind == "archive"),
        "evidence": job.probes,
        "stall_after_s": job.stall_after_s,
        "budget_s": job.budget_s,
    }


def finished_report(session: Session, job: Job, thresholds: Thresholds | None = None) -> Report:
    """A finished job's v1 report as stored when it finished, or, for a job finished
    without one (a failed or cancelled job, or one from before the store), built now."""
    stored = summaries.stored_report(session, job)
    if stored is not None:
        return stored
    # The report walks every run's test results: read them in two queries, not one per run.
    session.scalars(
        select(JobConfig)
        .where(JobConfig.job_id == job.id)
        .options(selectinload(JobConfig.runs).selectinload(Run.test_results))
    ).all()
    return build_report(job, thresholds)


def finished_page(session: Session, job: Job, thresholds: Thresholds | None = None) -> dict[str, Any]:
    """The job page's digest of a finished job's report (summaries.page_digest), as JSON: as
    stored when it finished, or made now of the report built now."""
    stored = summaries.stored_page(session, job)
    if stored is not None:
        return stored
    return summaries.page_digest(finished_report(session, job, thresholds))


def job_detail(
    session: Session,
    job: Job,
    thresholds: Thresholds | None = None,
    *,
    page: bool = False,
    with_report: bool = True,
    settings: Settings | None = None,
) -> dict[str, Any]:
    """The job, its progress, and once finished its v1 report (compared with its parent's),
    its notes judged by the configured ``thresholds`` as its findings were. ``page``: the
    report's digest for the job page (services/jobs/summaries.py page_digest).
    ``with_report`` False: without the "report" key (the caller adds the stored one).
    ``settings``: the progress names lost and missing workers (``progress``)."""
    # The page shows a finished job's progress nowhere (only a running one's): three
    # queries of its ten, a tenth of the 5,000-test job's page.
    shown = None if page and job.status in FINISHED else progress(session, job, settings)
    detail = {**job_summary(session, job), "progress": shown, "report": None, "comparison": None}
    # What the job will cost (services/jobs/forecast.py): the latest prediction, and beside it
    # the time left or, once finished, the time it took.
    detail["predicted_s"] = job.predicted_s
    detail["forecast"] = forecast.view(session, job)
    if job.kind is JobKind.bisect:
        # A bisect's answer is its result (services/jobs/bisect_jobs.py), not a report:
        # its runs are of many commits, never one configuration's statistics.
        detail["bisect"] = bisect_jobs.bisect_view(session, job)
    elif job.status in FINISHED:
        parent = session.get(Job, job.parent_id) if job.parent_id else None
        compared = parent is not None and parent.status is JobStatus.done
        # Without the report, it is read only for the comparison with the parent, which
        # reads the configurations and findings: the digest has them.
        if with_report or compared:
            # The job detail is JSON (the API's answer, the page's data): the report is
            # serialised here.
            built = None if page or not with_report else finished_report(session, job, thresholds)
            report = finished_page(session, job, thresholds) if built is None else report_json(built)
            detail["report"] = report
            if parent is not None and compared:
                detail["comparison"] = compare_reports(
                    summaries.read_page(finished_page(session, parent, thresholds)),
                    built if built is not None else summaries.read_page(report),
                )
    if not with_report:
        del detail["report"]
    return detail


def compare_reports(parent: summaries.Page, child: Report | summaries.Page) -> dict[str, Any]:
    """What changed between a job and its rerun: per-configuration medians, findings (the
    parent's page digest against the child's report or digest: both hold these whole)."""

    def medians(report: Report | summaries.Page) -> dict[str, float | None]:
        return {c.label: c.wall_s.median if c.wall_s else None for c in report.configs}

    before, after = medians(parent), medians(child)
    configs = []
    ratios = []
    for label in list(before) + [label for label in after if label not in before]:
        old, new = before.get(label), after.get(label)
        ratio = new / old if old and new else None
        configs.append({"label": label, "parent_median_s": old, "median_s": new, "ratio": ratio})
        if ratio is not None:
            ratios.append(ratio)
    parent_prints = {f.fingerprint: f for f in parent.findings}
    child_prints = {f.fingerprint: f for f in child.findings}

    def kinds(prints: dict[str, ReportFinding]) -> list[str]:
        return sorted({finding.kind for finding in prints.values()})

    return {
        "parent_id": parent.job.id,
        "configs": configs,
        "median_ratio_shared_configs": statistics.median(ratios) if ratios else None,
        "findings": {
            "still": kinds({p: child_prints[p] for p in child_prints if p in parent_prints}),
            "new": kinds({p: child_prints[p] for p in child_prints if p not in parent_prints}),
            "gone": kinds({p: parent_prints[p] for p in parent_prints if p not in child_prints}),
        },
    }


def find_artifact(session: Session, project: Project, key: str) -> dict[str, Any]:
    """The stored artifact reference ``key`` of one of the project's jobs, or NotFound."""
    job_part, _, _ = key.partition("/")
    if not job_part.startswith("job-") or not job_part[4:].isdigit():
        raise NotFound(f"artifact {key!r} does not exist")
    job = get_job(session, project, int(job_part[4:]))
    for evidence in job.evidence:
        for artifact in evidence.artifacts:
            if artifact.get("key") == key:
                return artifact
    raise NotFound(f"artifact {key!r} does not exist in job {job.id}")
