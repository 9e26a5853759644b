"""Alembic environment: online migrations only, with timeouts and a lock on Postgres."""

import sys
import time

from alembic import context
from sqlalchemy import text

# The read models' tables are on the same metadata once their module is imported.
from services import summary_models  # noqa: F401
from services.db import make_engine
from services.errors import MigrationLocked
from services.migrate import compared
from services.models import Base
from services.settings import Settings

# A constant key: every process migrating this database queues on the same lock.
ADVISORY_LOCK_KEY = 0x6C616774  # "lagt"

config = context.config
settings = config.attributes.get("settings") or Settings(database_url=config.get_main_option("sqlalchemy.url"))


def run_migrations_online() -> None:
    engine = make_engine(settings)
    with engine.connect() as connection:
        if connection.dialect.name == "postgresql":
            # Fail fast rather than queue behind a long transaction holding a table lock,
            # and let two pods running `migrate` at once take turns.
            connection.execute(text("SET lock_timeout = '10s'"))
            connection.execute(text("SET statement_timeout = '300s'"))
            _take_lock(connection)
        try:
            context.configure(
                connection=connection,
                target_metadata=Base.metadata,
                render_as_batch=connection.dialect.name == "sqlite",
                compare_type=True,
                include_object=compared,
            )
            with context.begin_transaction():
                context.run_migrations()
        finally:
            if connection.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": ADVISORY_LOCK_KEY})
                connection.commit()
    engine.dispose()


def _take_lock(connection) -> None:
    """Take the migration lock, waiting up to LAGTRACE_MIGRATE_LOCK_WAIT_S for the
    migration holding it (another pod, a Helm hook) and saying so while it waits."""
    deadline = time.monotonic() + settings.migrate_lock_wait_s
    told = False
    while True:
        taken = connection.scalar(text("SELECT pg_try_advisory_lock(:key)"), {"key": ADVISORY_LOCK_KEY})
        connection.commit()
        if taken:
            return
        if time.monotonic() >= deadline:
            raise MigrationLocked(
                f"another `lagtrace migrate` held the migration lock for over {settings.migrate_lock_wait_s:g} s "
                "(LAGTRACE_MIGRATE_LOCK_WAIT_S); nothing was changed: run it again once that one has finished"
            )
        if not told:
            print(
                f"lagtrace: another `lagtrace migrate` is running; waiting up to "
                f"{settings.migrate_lock_wait_s:g} s for it to finish",
                file=sys.stderr,
                flush=True,
            )
            told = True
        time.sleep(0.5)


if context.is_offline_mode():
    raise SystemExit("lagtrace migrates online only: point LAGTRACE_DATABASE_URL at the database")
run_migrations_online()
