"""Schema management through Alembic, the only path by which the schema is made."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from services.settings import Settings

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


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
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # Kept out of the ini file so that a URL with a password never lands on disk; '%' is
    # Alembic's interpolation character.
    config.set_main_option("sqlalchemy.url", settings.database_url.replace("%", "%%"))
    config.attributes["settings"] = settings
    return config


def upgrade(settings: Settings, revision: str = "head") -> None:
    command.upgrade(alembic_config(settings), revision)


def heads(settings: Settings) -> list[str]:
    return list(ScriptDirectory.from_config(alembic_config(settings)).get_heads())


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def ensure_current(settings: Settings, engine: Engine) -> None:
    """Bring the embedded SQLite database up to date; insist on `lagtrace migrate` elsewhere.

    A shared database is migrated deliberately, once, by an operator or the Helm hook;
    a laptop's SQLite file is migrated on first use so `lagtrace run` needs no set-up.
    """
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
