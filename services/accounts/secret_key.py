"""The dashboard's cookie-signing key when LAGTRACE_SECRET_KEY is unset: made once, kept in
the database, so every `serve` process (one per CPU, or on other hosts) signs and accepts
the same cookies, and a restart keeps everyone signed in."""

from __future__ import annotations

import secrets

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from services.models import ServiceSecret

SESSION_KEY = "session_signing_key"


def shared_secret_key(session: Session, name: str = SESSION_KEY) -> str:
    """The stored secret ``name``, made now if no process made it yet. Two processes making
    it at once both insert; the primary key keeps the first, and the second reads it back.
    Commits (its own short transaction): the key must be stored before any cookie is signed."""
    stored = session.scalar(select(ServiceSecret.value).where(ServiceSecret.name == name))
    if stored is not None:
        return stored
    session.add(ServiceSecret(name=name, value=secrets.token_urlsafe(48)))
    try:
        session.commit()
    except IntegrityError:
        session.rollback()  # another process stored it first: use theirs
    value = session.scalar(select(ServiceSecret.value).where(ServiceSecret.name == name))
    assert value is not None
    return value
