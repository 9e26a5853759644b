"""GitHub deliveries: push and pull_request start a job, check_run rerequested a rerun
(and its "Rerun with other CPUs" requested action one on more CPU configurations).

A pull request's job screens its head against its base commit (services/jobs/pull_requests.py).

Trust: a delivery is signed with the secret of the repository it names (registered with
`lagtrace repo register`; the server-wide secret only for repositories registered
without one), and it starts jobs only in that repository's project, cloned from the URL
given at registration, never from one in the payload. A delivery id is stored once
(primary key), so a redelivery is answered without a second job; the same signed body
under another delivery id is a replay and refused. Pull requests from forks run only
where the project allows it, and then with the base branch's `.lagtrace.yml`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel, ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from services.errors import BadInput, Conflict, LagtraceError, NotFound, Unauthorized
from services.github.client import RERUN_OTHER_CPUS, signature_valid
from services.jobs.bisect_jobs import rerun_bisect
from services.jobs.lifecycle import cancel_job
from services.jobs.sources import SHA, describe_validation_error
from services.jobs.submit import PullRequestRef, PushedRange, rerun_job, submit_job
from services.models import Job, JobKind, JobSource, Project, WebhookDelivery
from services.settings import Settings

PULL_REQUEST_ACTIONS = ("opened", "synchronize", "reopened")
NULL_SHA = "0" * 40
# "Rerun with other CPUs": the dashboard's common configurations (a worker refuses, with a
# message about the configuration, CPUs it does not have).
OTHER_CPU_CONFIGS = ("cpuset=0", "cpuset=0-1", "cpus=0.5", "cpus=1", "cpus=2")
MAX_RERUN_CONFIGS = 5


class WebhooksOff(LagtraceError):
    """No secret to check a delivery against: the receiver answers 503."""

    http_status = 503


class BadSignature(Unauthorized):
    """Missing or wrong X-Hub-Signature-256."""


class UnknownRepository(NotFound):
    """A delivery for a repository no project registered (signed with the server-wide
    secret, or at the per-repository URL of a repository nobody registered). ``field``:
    where the delivery named it (the URL's path, or the body's repository.full_name)."""

    def __init__(self, message: str, field: str = "repository.full_name"):
        super().__init__(message)
        self.field = field


def unregistered(full_name: str) -> str:
    return (
        f"repository {full_name} is not registered here: nothing was run; register it with "
        f"`lagtrace repo register {full_name} --project PROJECT` and use the secret it prints"
    )


class ReplayedDelivery(Conflict):
    """A body seen before under another delivery id."""

    # The delivery claims to be new, but its id is not the one this body came with.
    field = "header.X-GitHub-Delivery"


class Repository(BaseModel):
    full_name: str


class RepositoryRef(BaseModel):
    full_name: str


class PushedCommit(BaseModel):
    id: str


class PushEvent(BaseModel):
    ref: str
    after: str
    # The branch's commit before the push (all zeros for a new branch) and the commits the
    # push brought (GitHub lists at most 2,048): a gate's regression on several of them is
    # bisected between before and after (services/jobs/bisect_jobs.py bisect_regressions).
    before: str | None = None
    commits: list[PushedCommit] = []
    forced: bool = False
    deleted: bool = False
    repository: Repository


class PullRequestHead(BaseModel):
    sha: str
    ref: str
    # None when the fork was deleted: treated as a fork.
    repo: RepositoryRef | None = None


class PullRequestBase(BaseModel):
    sha: str
    ref: str


class PullRequest(BaseModel):
    number: int
    head: PullRequestHead
    base: PullRequestBase | None = None
    html_url: str | None = None


class PullRequestEvent(BaseModel):
    action: str
    pull_request: PullRequest
    repository: Repository


class CheckRun(BaseModel):
    id: int
    head_sha: str


class RequestedAction(BaseModel):
    identifier: str


class CheckRunEvent(BaseModel):
    action: str
    check_run: CheckRun
    repository: Repository
    requested_action: RequestedAction | None = None


CHECK_RUN_ACTIONS = ("rerequested", "requested_action")


@dataclass
class Outcome:
    outcome: str
    job_id: int | None = None
    duplicate: bool = False


Parsed = TypeVar("Parsed", bound=BaseModel)


def _parse(model: type[Parsed], payload: object, event: str) -> Parsed:
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        raise BadInput(f"{event} payload: {describe_validation_error(exc)}") from None


@dataclass
class Signer:
    """Who signed a delivery, known from the raw body alone: the server-wide secret and/or
    the registered projects whose own secret matches (two may share one)."""

    server_wide: bool
    projects: list[Project]


def verify_delivery(
    session: Session, settings: Settings, body: bytes, signature: str | None, repository: str | None = None
) -> Signer:
    """Check X-Hub-Signature-256 on the raw body before anything reads it.

    ``repository`` (owner/name, from the per-repository URL) narrows the candidates to that
    repository's secret: one HMAC. Without it every known secret is tried, one HMAC pass over
    the body each. Raises WebhooksOff, BadSignature.
    """
    query = select(Project).where(Project.github_repository.is_not(None))
    if repository is not None:
        query = query.where(Project.github_repository == repository)
    projects = list(session.scalars(query))
    server_wide = settings.github_webhook_secret.get_secret_value() if settings.github_webhook_secret else None
    own = [project for project in projects if project.webhook_secret]
    if repository is not None and not projects and server_wide is None:
        # The per-repository URL of a repository nobody registered: webhooks may well be on
        # for others, and what is true is that this one is not registered.
        raise UnknownRepository(unregistered(repository), field="path")
    if server_wide is None and not own:
        raise WebhooksOff(
            "GitHub webhooks are off: register the repository with a secret or set LAGTRACE_GITHUB_WEBHOOK_SECRET"
        )
    matches: dict[str, bool] = {}
    for secret in dict.fromkeys([*([server_wide] if server_wide else []), *(p.webhook_secret or "" for p in own)]):
        matches[secret] = signature_valid(secret, body, signature)
    signer = Signer(
        server_wide=server_wide is not None and matches[server_wide],
        projects=[project for project in own if matches[project.webhook_secret or ""]],
    )
    if not signer.server_wide and not signer.projects:
        raise BadSignature("missing or wrong X-Hub-Signature-256: nothing was stored")
    return signer


def authenticate_delivery(
    session: Session, signer: Signer, payload: object, repository: str | None = None
) -> Project | None:
    """The registered project the verified delivery is for (None: it names no registered one).

    The payload is read only now that the body is known to be signed; it must name a
    repository whose secret signed it: its own secret, or the server-wide one for a
    repository registered without one (or for none). Raises BadSignature.
    """
    named = payload.get("repository") if isinstance(payload, dict) else None
    full_name = named.get("full_name") if isinstance(named, dict) else None
    if repository is not None and full_name != repository:
        raise BadSignature(f"the delivery names {full_name!r}, not {repository}, the repository of this URL")
    project = None
    if isinstance(full_name, str):
        project = session.scalar(select(Project).where(Project.github_repository == full_name))
    if project is not None and project.webhook_secret:
        signed = any(candidate.id == project.id for candidate in signer.projects)
    else:
        signed = signer.server_wide
    if not signed:
        raise BadSignature("missing or wrong X-Hub-Signature-256: nothing was stored")
    return project


def handle_delivery(
    session: Session,
    settings: Settings,
    *,
    delivery_id: str,
    event: str,
    payload: object,
    project: Project | None = None,
    body: bytes = b"",
) -> Outcome:
    seen = session.get(WebhookDelivery, delivery_id)
    if seen is not None:
        return Outcome(f"duplicate delivery: {seen.outcome}", seen.job_id, duplicate=True)
    digest = hashlib.sha256(body).hexdigest()
    earlier = session.scalar(select(WebhookDelivery).where(WebhookDelivery.body_sha256 == digest))
    if earlier is not None:
        raise ReplayedDelivery(
            f"this body was delivered before as {earlier.delivery_id}: a replay under a new delivery id is refused"
        )
    action = payload.get("action") if isinstance(payload, dict) else None
    outcome = _dispatch(session, settings, event, payload, project)
    session.add(
        WebhookDelivery(
            delivery_id=delivery_id,
            event=event,
            action=action if isinstance(action, str) else None,
            job_id=outcome.job_id,
            outcome=outcome.outcome,
            body_sha256=digest,
        )
    )
    # Flushed here so a concurrent copy of the same delivery fails on the primary key.
    session.flush()
    return outcome


def _registered(project: Project | None, repository: Repository) -> Project:
    if project is None or project.github_repository != repository.full_name or not project.repository_url:
        raise UnknownRepository(unregistered(repository.full_name))
    return project


def _dispatch(session: Session, settings: Settings, event: str, payload: object, project: Project | None) -> Outcome:
    if event == "ping":
        return Outcome("pong")
    if event == "push":
        push = _parse(PushEvent, payload, event)
        if push.deleted or push.after == NULL_SHA:
            return Outcome("ignored: branch deleted")
        branch = push.ref.removeprefix("refs/heads/") if push.ref.startswith("refs/heads/") else None
        return _start(
            session,
            settings,
            _registered(project, push.repository),
            ref=push.ref,
            sha=push.after,
            branch=branch,
            pushed=_pushed_range(push),
        )
    if event == "pull_request":
        pull = _parse(PullRequestEvent, payload, event)
        if pull.action not in PULL_REQUEST_ACTIONS:
            return Outcome(f"ignored: pull_request {pull.action}")
        registered = _registered(project, pull.repository)
        head = pull.pull_request.head
        ref = f"refs/pull/{pull.pull_request.number}/head"
        if head.repo is None or head.repo.full_name != pull.repository.full_name:
            return _fork(session, settings, registered, pull, ref)
        # The base repository serves every pull request's head, forks included.
        return _start(
            session, settings, registered, ref=ref, sha=head.sha, branch=head.ref, pull_request=_pull_request_ref(pull)
        )
    if event == "check_run":
        check = _parse(CheckRunEvent, payload, event)
        if check.action not in CHECK_RUN_ACTIONS:
            return Outcome(f"ignored: check_run {check.action}")
        identifier = check.requested_action.identifier if check.requested_action else None
        if check.action == "requested_action" and identifier != RERUN_OTHER_CPUS:
            return Outcome(f"ignored: requested action {identifier}")
        _registered(project, check.repository)
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
        if parent.kind is JobKind.bisect:
            # A bisect's check run offers no action; GitHub's "Re-run" searches again.
            job = rerun_bisect(session, settings, parent)
            return Outcome(f"bisect again: job {job.id} repeats job {parent.id}", job.id)
        if check.action == "requested_action":
            configs = other_cpus([config.label for config in parent.configs])
            job = rerun_job(session, settings, parent, configs=configs, origin="github")
            return Outcome(f"rerun of job {parent.id} with {', '.join(configs)}", job.id)
        job = rerun_job(session, settings, parent, configs=[], origin="github")
        return Outcome(f"rerun of job {parent.id}", job.id)
    return Outcome(f"ignored: event {event}")


def other_cpus(labels: list[str]) -> list[str]:
    """The configurations of a "Rerun with other CPUs": the job's own (so the rerun is
    compared with it) and the common ones it did not run, up to MAX_RERUN_CONFIGS."""
    wanted = list(dict.fromkeys([*labels, *(c for c in OTHER_CPU_CONFIGS if c not in labels)]))
    return wanted[: max(MAX_RERUN_CONFIGS, len(labels))]


def _pushed_range(push: PushEvent) -> PushedRange | None:
    """The commits a push brought on top of its branch's earlier head; None for a new
    branch or a force-push (its ``before`` need not be an ancestor: nothing to bisect)."""
    if push.before is None or push.before == NULL_SHA or push.forced or not SHA.match(push.before):
        return None
    return PushedRange(before_sha=push.before, commits=len(push.commits))


def _pull_request_ref(pull: PullRequestEvent) -> PullRequestRef:
    number, base = pull.pull_request.number, pull.pull_request.base
    return PullRequestRef(
        number=number,
        url=pull.pull_request.html_url or f"https://github.com/{pull.repository.full_name}/pull/{number}",
        base_ref=base.ref if base else None,
        base_commit_sha=base.sha if base else None,
    )


def _start(
    session: Session,
    settings: Settings,
    project: Project,
    *,
    ref: str,
    sha: str,
    config_commit_sha: str | None = None,
    branch: str | None = None,
    pull_request: PullRequestRef | None = None,
    pushed: PushedRange | None = None,
) -> Outcome:
    job = submit_job(
        session,
        settings,
        project,
        None,
        repository_url=project.repository_url,
        ref=ref,
        commit_sha=sha,
        origin="github",
        github_repository=project.github_repository,
        config_commit_sha=config_commit_sha,
        trigger="pull_request" if pull_request else "push",
        branch=branch,
        pull_request=pull_request,
        pushed=pushed,
    )
    against = (
        f" against base {pull_request.base_commit_sha[:12]}" if pull_request and pull_request.base_commit_sha else ""
    )
    return Outcome(f"job {job.id} for {sha[:12]}{against}", job.id)


def _fork(session: Session, settings: Settings, project: Project, pull: PullRequestEvent, ref: str) -> Outcome:
    """A fork's pull request: its code may run, its configuration may not choose how."""
    head = pull.pull_request.head
    fork = head.repo.full_name if head.repo else "a deleted fork"
    if project.allow_fork_pull_requests and pull.pull_request.base is not None:
        outcome = _start(
            session,
            settings,
            project,
            ref=ref,
            sha=head.sha,
            config_commit_sha=pull.pull_request.base.sha,
            branch=head.ref,
            pull_request=_pull_request_ref(pull),
        )
        outcome.outcome += f" (fork {fork}: the base branch's .lagtrace.yml)"
        return outcome
    # Recorded as a cancelled job so the check run on the pull request says why.
    job = submit_job(
        session,
        settings,
        project,
        None,
        repository_url=project.repository_url,
        ref=ref,
        commit_sha=head.sha,
        origin="github",
        github_repository=project.github_repository,
        trigger="pull_request",
        branch=head.ref,
        pull_request=_pull_request_ref(pull),
    )
    cancel_job(session, settings, job, "policy")
    job.error = (
        f"not run: pull request #{pull.pull_request.number} comes from the fork {fork}, and project "
        f"{project.name} does not run forks' code (lagtrace repo register --allow-forks)"
    )
    return Outcome(f"fork {fork} not run", job.id)
