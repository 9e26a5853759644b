"""GitHub deliveries: push and pull_request start a job, check_run rerequested a rerun.

The signature is checked by the caller before anything here runs. A delivery id is
stored once (primary key), so a redelivery is answered without a second job.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from services.errors import BadInput
from services.jobs.lifecycle import get_or_create_project
from services.jobs.sources import describe_validation_error
from services.jobs.submit import rerun_job, submit_job
from services.models import Job, JobSource, WebhookDelivery
from services.settings import Settings

PULL_REQUEST_ACTIONS = ("opened", "synchronize", "reopened")
NULL_SHA = "0" * 40


class Repository(BaseModel):
    full_name: str
    clone_url: str


class PushEvent(BaseModel):
    ref: str
    after: str
    deleted: bool = False
    repository: Repository


class PullRequestHead(BaseModel):
    sha: str
    ref: str


class PullRequest(BaseModel):
    number: int
    head: PullRequestHead


class PullRequestEvent(BaseModel):
    action: str
    pull_request: PullRequest
    repository: Repository


class CheckRun(BaseModel):
    id: int
    head_sha: str


class CheckRunEvent(BaseModel):
    action: str
    check_run: CheckRun
    repository: Repository


@dataclass
class Outcome:
    outcome: str
    job_id: int | None = None
    duplicate: bool = False


def _parse(model: type[BaseModel], payload: object, event: str) -> BaseModel:
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        raise BadInput(f"{event} payload: {describe_validation_error(exc)}") from None


def handle_delivery(session: Session, settings: Settings, *, delivery_id: str, event: str, payload: object) -> Outcome:
    seen = session.get(WebhookDelivery, delivery_id)
    if seen is not None:
        return Outcome(f"duplicate delivery: {seen.outcome}", seen.job_id, duplicate=True)
    action = payload.get("action") if isinstance(payload, dict) else None
    outcome = _dispatch(session, settings, event, payload)
    session.add(
        WebhookDelivery(
            delivery_id=delivery_id,
            event=event,
            action=action if isinstance(action, str) else None,
            job_id=outcome.job_id,
            outcome=outcome.outcome,
        )
    )
    # Flushed here so a concurrent copy of the same delivery fails on the primary key.
    session.flush()
    return outcome


def _dispatch(session: Session, settings: Settings, event: str, payload: object) -> Outcome:
    if event == "ping":
        return Outcome("pong")
    if event == "push":
        push = _parse(PushEvent, payload, event)
        if push.deleted or push.after == NULL_SHA:
            return Outcome("ignored: branch deleted")
        return _start(session, settings, push.repository, ref=push.ref, sha=push.after)
    if event == "pull_request":
        pull = _parse(PullRequestEvent, payload, event)
        if pull.action not in PULL_REQUEST_ACTIONS:
            return Outcome(f"ignored: pull_request {pull.action}")
        # The base repository serves every pull request's head, forks included.
        return _start(
            session,
            settings,
            pull.repository,
            ref=f"refs/pull/{pull.pull_request.number}/head",
            sha=pull.pull_request.head.sha,
        )
    if event == "check_run":
        check = _parse(CheckRunEvent, payload, event)
        if check.action != "rerequested":
            return Outcome(f"ignored: check_run {check.action}")
        parent = session.scalar(
            select(Job)
            .join(JobSource, JobSource.job_id == Job.id)
            .where(
                JobSource.github_repository == check.repository.full_name,
                JobSource.github_check_run_id == check.check_run.id,
            )
        )
        if parent is None:
            return Outcome("ignored: not a lagtrace check run")
        job = rerun_job(session, settings, parent, configs=[], origin="github")
        return Outcome(f"rerun of job {parent.id}", job.id)
    return Outcome(f"ignored: event {event}")


def _start(session: Session, settings: Settings, repository: Repository, *, ref: str, sha: str) -> Outcome:
    project = get_or_create_project(session, repository.full_name)
    job = submit_job(
        session,
        settings,
        project,
        None,
        repository_url=repository.clone_url,
        ref=ref,
        commit_sha=sha,
        origin="github",
        github_repository=repository.full_name,
    )
    return Outcome(f"job {job.id} for {sha[:12]}", job.id)
