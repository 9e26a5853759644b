"""API tokens: one project each, shown once, stored as a SHA-256.

A token is 32 random bytes, so a plain SHA-256 is enough: there is nothing to brute
force, and a fast hash lets every request find its token through a unique index.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.errors import Unauthorized
from services.jobs.lifecycle import get_or_create_project
from services.models import ApiToken, Project, utcnow

TOKEN_PREFIX = "lt_"


@dataclass(frozen=True)
class Caller:
    project: Project
    token_name: str


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(session: Session, project: str, name: str = "default") -> str:
    """Store a new token for ``project`` (made if new) and return it: the only time it is seen."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    session.add(
        ApiToken(
            project=get_or_create_project(session, project), name=name, token_hash=_digest(token), prefix=token[:10]
        )
    )
    session.flush()
    return token


def authenticate(session: Session, authorization: str | None) -> Caller:
    """The caller behind an ``Authorization: Bearer ...`` header, or Unauthorized."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("send Authorization: Bearer <token> (make one with `lagtrace token create --project P`)")
    found = session.scalar(select(ApiToken).where(ApiToken.token_hash == _digest(token.strip())))
    if found is None or found.revoked_at is not None:
        raise Unauthorized("unknown or revoked token")
    found.last_used_at = utcnow()
    return Caller(project=found.project, token_name=found.name)
