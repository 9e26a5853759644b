"""API tokens: one project each, shown once, stored as a SHA-256.

A token is 32 random bytes, so a plain SHA-256 is enough: there is nothing to brute
force, and a fast hash lets every request find its token through a unique index.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy import Select, bindparam, select
from sqlalchemy.orm import Session, joinedload

from services.errors import BadInput, NotFound, Unauthorized
from services.jobs.lifecycle import get_or_create_project
from services.models import ApiToken, Project, database_now

TOKEN_PREFIX = "lt_"


@dataclass(frozen=True)
class Caller:
    project: Project
    token_name: str
    token_id: int
    # The token's last_used_at was written: the caller commits it (reads never commit).
    touched: bool = False


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(session: Session, project: str, name: str = "default", *, days: float | None = 90.0) -> str:
    """Store a new token for ``project`` (made if new) and return it: the only time it is seen.

    It expires after ``days`` (None: never; for a CI secret that is rotated by other means).
    """
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    session.add(
        ApiToken(
            project=get_or_create_project(session, project),
            name=name,
            token_hash=_digest(token),
            prefix=token[:10],
            # The database's clock, as every check reads it: a token made on a host whose
            # clock is off lasts its days all the same (tests/chaos/test_clock.py).
            expires_at=database_now(session) + dt.timedelta(days=days) if days is not None else None,
        )
    )
    session.flush()
    return token


def revoke_tokens(session: Session, *, prefix: str | None = None, project: str | None = None) -> list[str]:
    """Revoke the token(s) starting with ``prefix`` (as `token list` shows it), or all of a
    project's; returns the prefixes revoked. A revoked token is refused from the next request."""
    if not prefix and not project:
        raise BadInput("name a token prefix or a project")
    query = select(ApiToken).where(ApiToken.revoked_at.is_(None))
    if prefix:
        if len(prefix) < 6:
            raise BadInput("prefix: give at least 6 characters (lt_ and 3 more)")
        query = query.where(ApiToken.prefix.startswith(prefix[:10], autoescape=True))
    if project:
        query = query.join(Project).where(Project.name == project)
    found = list(session.scalars(query))
    if not found:
        raise NotFound("no such token (or it is revoked already)")
    for token in found:
        token.revoked_at = database_now(session)
    session.flush()
    return [token.prefix for token in found]


LAST_USED_PRECISION = dt.timedelta(minutes=1)


@functools.cache
def _token_with_project() -> Select:
    # Built once a process, not with its cache key on every API request.
    return select(ApiToken).options(joinedload(ApiToken.project)).where(ApiToken.token_hash == bindparam("token_hash"))


def authenticate(session: Session, authorization: str | None) -> Caller:
    """The caller behind an ``Authorization: Bearer ...`` header, or Unauthorized."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("send Authorization: Bearer <token> (make one with `lagtrace token create --project P`)")
    # With its project, in the same query: every API request reads both.
    found = session.scalar(_token_with_project(), {"token_hash": _digest(token.strip())})
    if found is None or found.revoked_at is not None:
        raise Unauthorized("unknown or revoked token")
    now = database_now(session)
    if found.expires_at is not None and _aware(found.expires_at) <= now:
        raise Unauthorized("the token has expired: make a new one with `lagtrace token create`")
    # To the minute is all "last used" needs: writing it on every request would make
    # concurrent requests with the same token queue on its row lock.
    touched = found.last_used_at is None or now - _aware(found.last_used_at) >= LAST_USED_PRECISION
    if touched:
        found.last_used_at = now
    return Caller(project=found.project, token_name=found.name, token_id=found.id, touched=touched)


def _aware(moment: dt.datetime) -> dt.datetime:
    # SQLite hands back naive datetimes; they were written as UTC.
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


@dataclass(frozen=True)
class TokenListing:
    """What `lagtrace token list` shows of a token: never its secret or its hash."""

    prefix: str
    project: str
    name: str
    created_at: dt.datetime
    expires_at: dt.datetime | None
    last_used_at: dt.datetime | None
    state: str  # active, expired, revoked


def list_tokens(session: Session, *, project: str | None = None) -> list[TokenListing]:
    """Every token (of ``project``), oldest first, with whether it still works."""
    query = select(ApiToken).join(Project).order_by(ApiToken.created_at, ApiToken.id)
    if project:
        query = query.where(Project.name == project)
    now = database_now(session)
    listed = []
    for token in session.scalars(query):
        if token.revoked_at is not None:
            state = "revoked"
        elif token.expires_at is not None and _aware(token.expires_at) <= now:
            state = "expired"
        else:
            state = "active"
        listed.append(
            TokenListing(
                prefix=token.prefix,
                project=token.project.name,
                name=token.name,
                created_at=_aware(token.created_at),
                expires_at=_aware(token.expires_at) if token.expires_at else None,
                last_used_at=_aware(token.last_used_at) if token.last_used_at else None,
                state=state,
            )
        )
    return listed
