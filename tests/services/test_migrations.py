"""Alembic is the only schema path: head from empty, one head, no drift from the models."""

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from services import migrate
from services.db import make_engine
from services.models import Base
from services.settings import Settings


def test_upgrade_from_empty_reaches_head_and_matches_the_models(database_url):
    settings = Settings(database_url=database_url)
    migrate.upgrade(settings)
    engine = make_engine(settings)
    try:
        assert migrate.current_revision(engine) in migrate.heads(settings)
        assert set(Base.metadata.tables) <= set(inspect(engine).get_table_names())
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            assert compare_metadata(context, Base.metadata) == []
        migrate.upgrade(settings)  # a second upgrade is a no-op, not an error
    finally:
        engine.dispose()


def test_there_is_a_single_head():
    assert len(migrate.heads(Settings(database_url="sqlite://"))) == 1


def test_a_shared_database_is_not_migrated_behind_the_operators_back(postgres_url):
    settings = Settings(database_url=postgres_url)
    engine = make_engine(settings)
    try:
        try:
            migrate.ensure_current(settings, engine)
        except migrate.SchemaNotCurrent as exc:
            assert "lagtrace migrate" in str(exc)
        else:
            raise AssertionError("an empty Postgres database was accepted without `lagtrace migrate`")
        assert inspect(engine).get_table_names() == []
    finally:
        engine.dispose()
