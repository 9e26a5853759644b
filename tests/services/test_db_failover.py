"""A database failover as a worker meets it, on the real PostgreSQL server: its pooled
connections are cut, and the address leads for a while to a server that only reads
(SQLSTATE 25006 on a write). That is an outage to wait out, not a failed statement: the
connection is dropped, and once the new primary answers the same engine writes again."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError

from services.db import make_engine, unreachable
from services.settings import Settings


def test_a_read_only_server_mid_failover_is_an_outage_and_passes(postgres_url, postgres_server_url):
    name = postgres_url.rsplit("/", 1)[1]
    admin = create_engine(postgres_server_url, isolation_level="AUTOCOMMIT")
    engine = make_engine(Settings(database_url=postgres_url))
    try:
        with engine.begin() as connection:
            connection.execute(text("CREATE TABLE beats (n int)"))
        # The failover: new sessions only read (as a standby does), the old ones are cut.
        with admin.connect() as connection:
            connection.execute(text(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on'))
            connection.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :name"),
                {"name": name},
            )
        with pytest.raises(DBAPIError) as refused, engine.begin() as connection:
            connection.execute(text("INSERT INTO beats VALUES (1)"))
        assert getattr(refused.value.orig, "sqlstate", None) == "25006", refused.value
        assert unreachable(refused.value)  # waited out (services/jobs/lease.py), never a failure
        assert refused.value.connection_invalidated  # the read-only connection is not kept
        # The new primary answers: the same engine writes again, with no restart.
        with admin.connect() as connection:
            connection.execute(text(f'ALTER DATABASE "{name}" RESET default_transaction_read_only'))
        with engine.begin() as connection:
            connection.execute(text("INSERT INTO beats VALUES (2)"))
        with engine.connect() as connection:
            assert connection.execute(text("SELECT n FROM beats")).scalars().all() == [2]
    finally:
        engine.dispose()
        admin.dispose()


def test_a_refused_statement_is_still_a_failure(postgres_url):
    engine = make_engine(Settings(database_url=postgres_url))
    try:
        with pytest.raises(DBAPIError) as refused, engine.begin() as connection:
            connection.execute(text("INSERT INTO no_such_table VALUES (1)"))
        assert not unreachable(refused.value) and not refused.value.connection_invalidated
    finally:
        engine.dispose()
