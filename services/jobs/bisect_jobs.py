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

from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy import select
from sqlalchemy.orm import Session

from services.errors import BadInput
from services.jobs.dispatch import BISECT
from services.jobs.ledger import add_task
from services.jobs.lifecycle import create_job, run_timeout
from services.jobs.sources import check_ref, check_repository_url
from services.jobs.spec import JobSpec, Spec, check_spec_syntax, enforce_policy
from services.measure import pytest_command
from services.measure.configs import parse_spec
from services.measure.executors import EXECUTORS
from services.models import Bisect, Job, JobKind, JobSource, Project
from services.settings import Settings

# What started it, by the entry point that stored it (as services/jobs/submit.py TRIGGERS).
TRIGGERS = {"api": "api", "web": "dashboard"}


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
    test: str = Field(min_length=1, max_length=4096, description="The pytest node id of the one test to time.")
    config: Spec = Field(description="The CPU configuration the change shows in (cpuset=0, cpus=0.5, ...).")
    good: str = Field(min_length=1, max_length=255, description="The last revision known good (the older end).")
    bad: str = Field(
        min_length=1, max_length=255, description="A revision known bad (the newer end); good is its ancestor."
    )
    command: list[str] | None = Field(
        None,
        min_length=1,
        max_length=256,
        description="The pytest command, run narrowed to the test at each commit. Unset: the command of "
        ".lagtrace.yml at the bad end, with its executor, image and timeout.",
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
    def _a_pytest_command(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not pytest_command.is_pytest(value):
            raise ValueError(f"{value[0]!r}: bisect times one test of a pytest command (pytest, python -m pytest)")
        return value

    @field_validator("config")
    @classmethod
    def _valid_config(cls, value: str) -> str:
        return check_spec_syntax(value)

    _revisions = field_validator("good", "bad")(_revision)


def submit_bisect(session: Session, settings: Settings, project: Project, spec: BisectSpec, *, origin: str) -> Job:
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
        )
    )
    session.add(Bisect(job_id=job.id, test_id=spec.test, good=spec.good, bad=spec.bad))
    session.flush()
    add_task(session, job, settings, BISECT)
    return job


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
