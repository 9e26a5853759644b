"""A bisect as a service job: what it asks for, storing it, and what the API and the pages
show of it (docs/explanations/bisect.md, docs/guides/service.md).

A bisect job is a Job of kind ``bisect`` with one configuration (the one the search
measures in), a JobSource on the project's registered repository, a Bisect row (the test,
the two revisions, and once the search ends its result), and one ledger step, ``bisect``
(services/jobs/bisect_step.py), which fetches the history, resolves the revisions and
runs the search. The API and the dashboard's form both store it here.
"""

from __future__ import annotations

import shlex
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from sqlalchemy import select
from sqlalchemy.orm import Session

from services.diagnose.metrics import SlowerSinceMetrics, metrics_of
from services.errors import BadInput
from services.jobs import gate
from services.jobs.dispatch import BISECT
from services.jobs.ledger import add_task, notify_step
from services.jobs.lifecycle import create_job, run_timeout
from services.jobs.sources import check_ref, check_repository_url
from services.jobs.spec import JobSpec, Spec, check_spec_syntax, enforce_policy
from services.measure import pytest_command
from services.measure.configs import parse_spec
from services.measure.executors import EXECUTORS
from services.models import Bisect, Finding, Job, JobKind, JobSource, Project
from services.settings import Settings

# What started it, by the entry point that stored it (as services/jobs/submit.py TRIGGERS);
# "regression": a gate's verdict on a push of several commits, or a change point
# (bisect_regressions); "rerun": GitHub's Re-run on a bisect's check run (rerun_bisect).
TRIGGERS = {"api": "api", "web": "dashboard", "regression": "regression", "rerun": "rerun"}

# The regressions a finished job bisects, the largest first (bisect_regressions): each is a
# job of its own (30-36 runs of one test on a 16-commit range: tests/bench/bench_bisect.py),
# and two tests slowed by one push are most often slowed by one commit.
MAX_AUTO_BISECTS = 2


def _revision(value: str) -> str:
    try:
        return check_ref(value)
    except BadInput:
        raise ValueError(f"{value!r}: not a branch, tag or commit name") from None


class BisectSpec(BaseModel):
    """The body of POST /api/v1/bisects, and what the test page's form asks for."""

    model_config = ConfigDict(extra="forbid")

    project: str = Field(
        min_length=1, max_length=200, description="The project (its name): one with a registered git repository."
    )
    test: str | None = Field(
        None,
        min_length=1,
        max_length=4096,
        description="The pytest node id of the one test to time. Unset: the whole command's wall time (any program).",
    )
    config: Spec = Field(description="The CPU configuration the change shows in (cpuset=0, cpus=0.5, ...).")
    good: str = Field(min_length=1, max_length=255, description="The last revision known good (the older end).")
    bad: str = Field(
        min_length=1, max_length=255, description="A revision known bad (the newer end); good is its ancestor."
    )
    command: list[str] | None = Field(
        None,
        min_length=1,
        max_length=256,
        description="The command: with a test, a pytest command, run narrowed to the test at each commit; "
        "without one, any program, timed whole. Unset: the command of .lagtrace.yml at the bad end, with its "
        "executor, image and timeout.",
    )
    executor: str | None = Field(
        None,
        max_length=32,
        description="auto, local or docker (as the server allows). Unset: auto, or .lagtrace.yml's.",
    )
    timeout_s: float | None = Field(None, gt=0, le=86400, description="Kill a run after this many seconds.")
    budget_s: float | None = Field(
        None,
        gt=0,
        le=7 * 86400,
        description="Stop before the runs' wall time would pass this many seconds (the verdict is then undecided). "
        "Unset: no bound but the search's own (at most 8 runs a commit measured).",
    )

    @field_validator("command", mode="before")
    @classmethod
    def _split_command(cls, value: Any) -> Any:
        return shlex.split(value) if isinstance(value, str) else value

    @field_validator("command")
    @classmethod
    def _a_test_needs_pytest(cls, value: list[str] | None, info: ValidationInfo) -> list[str] | None:
        # ``test`` is declared before ``command``: validated first, in info.data.
        if value is not None and info.data.get("test") is not None and not pytest_command.is_pytest(value):
            raise ValueError(
                f"{value[0]!r}: a test is timed in a pytest command (pytest, python -m pytest); leave test out to "
                "time the whole command"
            )
        return value

    @field_validator("config")
    @classmethod
    def _valid_config(cls, value: str) -> str:
        return check_spec_syntax(value)

    _revisions = field_validator("good", "bad")(_revision)


def submit_bisect(
    session: Session,
    settings: Settings,
    project: Project,
    spec: BisectSpec,
    *,
    origin: str,
    bad_sha: str | None = None,
    started_by: int | None = None,
) -> Job:
    """Store a queued bisect job of ``project`` (the caller's: its token's, or a project the
    user may see) and its step; the revisions are resolved by the step, on the fetched
    history (an unknown one fails the job, naming it)."""
    if spec.project != project.name:
        raise BadInput(
            f"project {spec.project!r}: no such project here (this token is {project.name}'s)", field="project"
        )
    if not project.repository_url:
        raise BadInput(
            f"project {project.name}: no registered git repository to fetch the commits from "
            "(`lagtrace repo register`); a project of uploaded archives cannot be bisected",
            field="project",
        )
    check_repository_url(project.repository_url, settings)
    cpus = settings.node_cpu_count
    try:
        config = parse_spec(spec.config, tuple(range(cpus)), machine="the nodes")
    except BadInput as exc:
        raise BadInput(f"config: {exc} (LAGTRACE_NODE_CPUS={cpus})", field="config") from None
    executor = spec.executor or "auto"
    if executor not in EXECUTORS:
        raise BadInput(f"executor: unknown executor {executor!r} (known: {', '.join(EXECUTORS)})", field="executor")
    if spec.command is not None:
        # The server's policy, as for every job: its executors, its longest run.
        enforce_policy(JobSpec(command=spec.command, executor=executor, timeout_s=spec.timeout_s), settings, project)
    elif executor != "auto":
        enforce_policy(JobSpec(command=["pytest"], executor=executor), settings, project)
    job = create_job(
        session,
        project=project.name,
        command=spec.command or [],
        configs=[config],
        executor=executor,
        workdir=None,
        repeat=1,
        timeout_s=run_timeout(settings, spec.timeout_s) if spec.timeout_s is not None else None,
        source=origin,
        probes=[],
        budget_s=spec.budget_s,
        kind=JobKind.bisect,
    )
    job.trigger = TRIGGERS.get(origin, origin)
    session.add(
        JobSource(
            job_id=job.id,
            kind="git",
            repository_url=project.repository_url,
            # No command given: .lagtrace.yml's, read at the bad end by the step.
            from_repository_config=spec.command is None,
            # A GitHub repository's bisect reports on the bad commit (its check run:
            # services/github/client.py); by hand, once the step has resolved it.
            github_repository=project.github_repository,
            github_head_sha=bad_sha,
        )
    )
    session.add(Bisect(job_id=job.id, test_id=spec.test, good=spec.good, bad=spec.bad, started_by_job_id=started_by))
    session.flush()
    add_task(session, job, settings, BISECT)
    if bad_sha is not None:
        notify_step(session, job, settings)  # in progress on the bad commit from now on
    return job


def bisect_regressions(session: Session, settings: Settings, job: Job, steps: list[Finding]) -> list[Job]:
    """Bisect jobs for what a finished push showed slower (unless its .lagtrace.yml says
    ``bisect_regressions: false``), the largest first, at most MAX_AUTO_BISECTS:

    - a gate's regressions on a push of several commits: which of the commits between the
      branch's earlier head and this one slowed each test, in the gate's configuration (a
      push of one commit names its culprit already; a force-push or a new branch has no
      earlier head on its line: services/github/webhooks.py);
    - the change points this push completed in the branch's history (``steps``, slower_since
      findings): which commit between the last fast push and the first slow one, measured
      interleaved in one search (the history's pushes ran on other days, perhaps other nodes).

    A request already asked for (the same test, configuration and commits) is not repeated.
    Each bisect is named in the job's notes."""
    source = session.get(JobSource, job.id)
    project = job.project
    if source is None or source.bisect_regressions is False or not project.repository_url:
        return []
    wanted: list[tuple[float, str, str, str, str, str]] = []  # ratio, test, config, good, bad, why
    judged = gate.stored_gate(job) if job.kind is JobKind.gate else None
    if judged is not None and source.before_commit_sha and source.commit_sha and (source.pushed_commits or 0) >= 2:
        for test in judged.tests:
            if test.verdict == gate.REGRESSED and test.ratio is not None:
                why = f"which of the {source.pushed_commits} pushed commits"
                wanted.append((test.ratio, test.test, judged.config, source.before_commit_sha, source.commit_sha, why))
    for step in steps:
        found = metrics_of(step.kind, step.metrics)
        if not isinstance(found, SlowerSinceMetrics) or not (step.test_id and step.config_label):
            continue
        good, bad = found.last_fast.commit, found.first_slow.commit
        if good and bad:
            why = f"a change point on {found.branch}: which commit of"
            wanted.append((found.ratio, step.test_id, step.config_label, good, bad, why))
    started: list[Job] = []
    for ratio, test_id, config, good, bad, why in sorted(wanted, key=lambda entry: -entry[0]):
        if len(started) == MAX_AUTO_BISECTS:
            break
        if _asked_before(session, project, test_id, config, good, bad):
            continue
        try:
            spec = BisectSpec(project=project.name, test=test_id, config=config, good=good, bad=bad)
            bisect_job = submit_bisect(
                session, settings, project, spec, origin="regression", bad_sha=bad, started_by=job.id
            )
        except (BadInput, ValueError) as exc:
            # The server's policy refuses it now (a repository host, a configuration): the
            # job that found the slowdown stands, and says why nothing bisects it.
            job.notes = [*job.notes, f"no bisect of {test_id} in {config}: {exc}"]
            continue
        started.append(bisect_job)
        job.notes = [
            *job.notes,
            f"bisect job {bisect_job.id}: {why} {good[:10]}..{bad[:10]} slowed {test_id} ({ratio:.2f}x in {config})",
        ]
    return started


def rerun_bisect(session: Session, settings: Settings, parent: Job) -> Job:
    """The same bisect again (GitHub's "Re-run" on its check run): the same test,
    configuration and commits, the command as the parent had it (.lagtrace.yml's at the bad
    end, read again, when it had none of its own)."""
    row = session.get(Bisect, parent.id)
    source = session.get(JobSource, parent.id)
    if row is None or source is None or not parent.configs:
        raise BadInput(f"job {parent.id} is not a bisect")
    own = not source.from_repository_config
    spec = BisectSpec(
        project=parent.project.name,
        test=row.test_id,
        config=parent.configs[0].label,
        good=row.good_sha or row.good,
        bad=row.bad_sha or row.bad,
        command=list(parent.command) if own else None,
        executor=parent.executor if own else None,
        timeout_s=parent.timeout_s if own else None,
        budget_s=parent.budget_s,
    )
    job = submit_bisect(
        session,
        settings,
        parent.project,
        spec,
        origin="rerun",
        bad_sha=row.bad_sha or source.github_head_sha,
        started_by=row.started_by_job_id,
    )
    job.parent_id = parent.id
    return job


def _asked_before(session: Session, project: Project, test_id: str, config: str, good: str, bad: str) -> bool:
    return any(
        job.configs and job.configs[0].label == config
        for job in session.scalars(
            select(Job)
            .join(Bisect, Bisect.job_id == Job.id)
            .where(Job.project_id == project.id, Bisect.test_id == test_id, Bisect.good == good, Bisect.bad == bad)
        )
    )


def bisect_view(session: Session, job: Job) -> dict[str, Any] | None:
    """What a job's detail says of its bisect: the request, and once it ended the result
    (services/jobs/bisect.py BisectResult.as_json, with the culprit's subject)."""
    row = session.get(Bisect, job.id)
    if row is None:
        return None
    return {
        "test": row.test_id,
        "config": job.configs[0].label if job.configs else None,
        "good": row.good,
        "bad": row.bad,
        "good_sha": row.good_sha,
        "bad_sha": row.bad_sha,
        # The gate job whose regression started it (None: asked for by hand).
        "started_by_job": row.started_by_job_id,
        "result": row.result,
    }


def bisects_of_test(session: Session, project: Project, test_id: str, limit: int = 20) -> list[tuple[Job, Bisect]]:
    """The project's bisects of one test, newest first (its page lists them)."""
    rows = session.execute(
        select(Job, Bisect)
        .join(Bisect, Bisect.job_id == Job.id)
        .where(Job.project_id == project.id, Bisect.test_id == test_id)
        .order_by(Job.id.desc())
        .limit(limit)
    ).all()
    return [(job, bisect) for job, bisect in rows]
