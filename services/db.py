"""Engine and session factory. One session per command, request or task; no global session."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from services.settings import Settings

# Connection exceptions (08xxx), a server shutting down or starting up (57P0x), and a
# read-only server mid-failover (25006).
READ_ONLY_STATE = "25006"
_UNREACHABLE_STATES = ("57P01", "57P02", "57P03", READ_ONLY_STATE)


def make_engine(settings: Settings, *, pool_size: int | None = None) -> Engine:
    """``pool_size``: the connections kept open (SQLAlchemy's default, 5, when None); a
    process that runs more threads at once than it keeps connections opens and closes a
    connection for every request beyond them (`lagtrace serve` keeps one a thread)."""
    url = settings.database_url
    if url.startswith("postgresql://"):
        # psycopg 3 is the driver we test against; accept the plain URL people paste.
        url = "postgresql+psycopg://" + url[len("postgresql://") :]
    if url.startswith("sqlite:///"):
        Path(url[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
    # A server that went away fails a connection attempt in seconds rather than the
    # kernel's minutes, so a step or request notices the outage and says so.
    connect_args = {"connect_timeout": 10} if url.startswith("postgresql") else {}
    pooled = {"pool_size": pool_size} if pool_size is not None else {}
    engine = create_engine(url, pool_pre_ping=True, connect_args=connect_args, json_serializer=json_dumps, **pooled)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    else:
        event.listen(engine, "handle_error", _read_only_is_a_disconnect)
    return engine


def _read_only_is_a_disconnect(context) -> None:
    """A failover: the old primary, demoted (or a standby the address still leads to),
    refuses writes with SQLSTATE 25006 (read_only_sql_transaction). The connection is
    treated as lost (SQLAlchemy's handle_error event, ``is_disconnect``): the pool drops
    it and the next attempt connects again, and ``unreachable`` waits the outage out
    instead of failing the step (tests/services/test_db_failover.py)."""
    if getattr(context.original_exception, "sqlstate", None) == READ_ONLY_STATE:
        context.is_disconnect = True


def json_dumps(value: Any) -> str:
    """JSON as the JSON columns store it: a non-finite float becomes null, as in
    JavaScript's JSON.stringify. PostgreSQL refuses the token ``Infinity`` (RFC 8259 has
    no such number), and one such value used to lose a whole report."""
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(value), allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    # Foreign keys are off by default in SQLite; WAL lets a reader look while a job writes.
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.close()


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False)


def unreachable(exc: BaseException) -> bool:
    """The database could not be reached (down, restarting, connection lost), as opposed
    to a statement it refused: the first is waited out, the second is a failure."""
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    sqlstate = getattr(exc.orig, "sqlstate", None)
    if sqlstate == READ_ONLY_STATE:
        return True  # raised as InternalError (class 25), not OperationalError
    if not isinstance(exc, OperationalError | InterfaceError):
        return False
    # No SQLSTATE: the driver never heard from a server (refused, reset, timed out).
    return sqlstate is None or sqlstate.startswith("08") or sqlstate in _UNREACHABLE_STATES
