"""Registering a GitHub repository with a project: the only way deliveries start jobs.

The registration fixes what a delivery cannot choose: the project, the clone URL, the
webhook secret, whether forks' pull requests run, and which runner images jobs may name.
"""

from __future__ import annotations

import re
import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.errors import BadInput
from services.jobs.lifecycle import get_or_create_project
from services.jobs.sources import check_repository_url
from services.models import Project
from services.settings import Settings

FULL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}$")
MIN_SECRET_LENGTH = 16


def register_repository(
    session: Session,
    settings: Settings,
    *,
    project: str,
    full_name: str,
    url: str | None = None,
    secret: str | None = None,
    allow_forks: bool = False,
    images: list[str] | None = None,
    rotate_secret: bool = False,
) -> tuple[Project, str]:
    """Bind ``full_name`` to ``project`` (made if new); returns it and its webhook secret.

    ``url`` defaults to GitHub's https clone URL. ``secret`` None keeps the secret of a
    repository registered before (GitHub signs its deliveries with it: a new one would
    make each of them a 401 until the webhook is edited), unless ``rotate_secret``; a
    repository without one gets a random one.
    """
    if not FULL_NAME.match(full_name):
        raise BadInput(f"repository {full_name!r}: owner/name expected")
    url = check_repository_url(url or f"https://github.com/{full_name}.git", settings)
    if secret is not None and len(secret) < MIN_SECRET_LENGTH:
        raise BadInput(f"secret: at least {MIN_SECRET_LENGTH} characters")
    bound = session.scalar(select(Project).where(Project.github_repository == full_name))
    target = get_or_create_project(session, project)
    if bound is not None and bound.id != target.id:
        raise BadInput(f"repository {full_name} is registered with project {bound.name} already")
    target.github_repository = full_name
    target.repository_url = url
    if secret is not None:
        target.webhook_secret = secret
    elif rotate_secret or not target.webhook_secret or bound is None:
        target.webhook_secret = secrets.token_urlsafe(32)
    target.allow_fork_pull_requests = allow_forks
    target.allowed_images = list(dict.fromkeys(images or []))
    session.flush()
    assert target.webhook_secret is not None
    return target, target.webhook_secret
