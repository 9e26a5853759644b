"""What every request needs: settings, the dispatcher, and one session per request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from flask import current_app, g
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from services.accounts.ratelimit import SlidingWindow
from services.jobs.dispatch import Dispatcher
from services.settings import Settings

if TYPE_CHECKING:
    from api.metrics import ApiMetrics


@dataclass
class ApiContext:
    settings: Settings
    dispatcher: Dispatcher
    engine: Engine
    session_factory: sessionmaker[Session]
    metrics: ApiMetrics
    # Abuse limits (services.accounts.ratelimit), per process.
    submissions: SlidingWindow
    sign_in_failures: SlidingWindow


def ctx() -> ApiContext:
    return current_app.extensions["lagtrace"]


def db() -> Session:
    """The request's session, opened on first use and closed (rolled back) at teardown."""
    if "db" not in g:
        g.db = ctx().session_factory()
    return g.db


def close_db(_exc: BaseException | None = None) -> None:
    session = g.pop("db", None)
    if session is not None:
        session.close()
