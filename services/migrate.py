"""Schema management through Alembic, the only path by which the schema is made."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, inspect, text

from services.settings import Settings

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"

# The newest migration. A database that already holds it (every `lagtrace run` after a
# laptop's first, every service process) is checked with one query: loading Alembic and
# reading its scripts cost each process about 0.25 s of CPU, more than the query by far.
# Alembic is imported below only where a migration runs or is compared.
# tests/services/test_migrations.py::test_head_is_alembics_single_head keeps it in step.
HEAD = "0033_bisect_command"


# Indexes a migration makes only where the server can (0018: the catalogue search's
# trigram index needs PostgreSQL's pg_trgm). They are not in the models, whose tables
# must be the same on SQLite and on PostgreSQL, so comparing the two skips them.
SERVER_OPTIONAL_INDEXES = frozenset({"ix_test_catalogue_test_trgm"})


def compared(_object, name, type_, _reflected, _compare_to) -> bool:
    """Alembic's include_object for comparing a database with the models."""
    return not (type_ == "index" and name in SERVER_OPTIONAL_INDEXES)


class SchemaNotCurrent(Exception):
    """The database is not at the newest migration; `lagtrace migrate` brings it there."""


def alembic_config(settings: Settings) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # Kept out of the ini file so that a URL with a password never lands on disk; '%' is
    # Alembic's interpolation character.
    config.set_main_option("sqlalchemy.url", settings.database_url.replace("%", "%%"))
    config.attributes["settings"] = settings
    return config


def upgrade(settings: Settings, revision: str = "head") -> None:
    from alembic import command

    command.upgrade(alembic_config(settings), revision)


def heads(settings: Settings) -> list[str]:
    from alembic.script import ScriptDirectory

    return list(ScriptDirectory.from_config(alembic_config(settings)).get_heads())


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def ensure_current(settings: Settings, engine: Engine) -> None:
    """Bring the embedded SQLite database up to date; insist on `lagtrace migrate` elsewhere.

    A shared database is migrated deliberately, once, by an operator or the Helm hook;
    a laptop's SQLite file is migrated on first use so `lagtrace run` needs no set-up.
    """
    if _stored_revision(engine) == HEAD:
        return
    if engine.dialect.name == "sqlite":
        upgrade(settings)
        return
    current = current_revision(engine)
    head = heads(settings)
    if current not in head:
        raise SchemaNotCurrent(
            f"the database is at revision {current or 'none (empty)'}, the code expects "
            f"{', '.join(head)}: run `lagtrace migrate` first"
        )


def _stored_revision(engine: Engine) -> str | None:
    """The revision Alembic recorded (its one-row table alembic_version), read without
    Alembic; None where the table is not there yet. A database that cannot be reached
    raises here, as Alembic would."""
    with engine.connect() as connection:
        if not inspect(connection).has_table("alembic_version"):
            return None
        return connection.scalar(text("SELECT version_num FROM alembic_version"))
