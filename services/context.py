"""What every request needs, shared by the API and the dashboard: settings, the
dispatcher, and one database session per request.

Framework-free on purpose: the app factory (cli/wsgi.py) opens a scope when a request
starts (``enter``) and closes it at teardown (``leave``); api/ and web/ only call
``ctx()`` and ``db()``. Context variables keep two requests on two threads apart.
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from dataclasses import dataclass, field

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from services.accounts.ratelimit import Limits, Window
from services.db import make_engine, make_session_factory
from services.jobs import outbox
from services.jobs.dispatch import Dispatcher
from services.settings import Settings


@dataclass
class AppContext:
    settings: Settings
    dispatcher: Dispatcher
    engine: Engine
    # Bound to the dispatcher: whatever a request commits is sent by the outbox.
    session_factory: sessionmaker[Session]
    # What a layer adds for itself (the API's metrics), by name.
    extensions: dict[str, object] = field(default_factory=dict)
    # Abuse limits (services.accounts.ratelimit): in Redis where there is one (shared by
    # every process and replica), else in this process; made from the settings.
    submissions: Window = field(init=False)
    sign_in_failures: Window = field(init=False)
    sign_in_client_failures: Window = field(init=False)

    def __post_init__(self) -> None:
        limits = Limits(self.settings)
        self.submissions = limits.submissions
        self.sign_in_failures = limits.sign_in_failures
        self.sign_in_client_failures = limits.sign_in_client_failures

    @classmethod
    def make(cls, settings: Settings, dispatcher: Dispatcher, engine: Engine | None = None) -> AppContext:
        engine = engine or make_engine(settings)
        return cls(settings, dispatcher, engine, outbox.bind(make_session_factory(engine), dispatcher))


@dataclass
class _Scope:
    context: AppContext
    session: Session | None = None


_scope: ContextVar[_Scope | None] = ContextVar("lagtrace_request", default=None)


def enter(context: AppContext) -> Token[_Scope | None]:
    return _scope.set(_Scope(context))


def leave(token: Token[_Scope | None]) -> None:
    """Close the request's session (rolling back what was not committed)."""
    scope = _scope.get()
    _scope.reset(token)
    if scope is not None and scope.session is not None:
        scope.session.close()


def _current() -> _Scope:
    scope = _scope.get()
    if scope is None:
        raise RuntimeError("no request scope: the app factory opens one per request (services.context.enter)")
    return scope


def ctx() -> AppContext:
    return _current().context


def db() -> Session:
    """The request's session, opened on first use and closed (rolled back) at teardown."""
    scope = _current()
    if scope.session is None:
        scope.session = scope.context.session_factory()
    return scope.session
