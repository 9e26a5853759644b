"""Alembic is the only schema path: head from empty, one head, no drift from the models."""

import subprocess
import sys

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from services import (
    migrate,
    summary_models,  # noqa: F401  (its tables are compared with Base's)
)
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
            context = MigrationContext.configure(
                connection, opts={"compare_type": True, "include_object": migrate.compared}
            )
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


def test_0017_fills_each_problems_ratio_from_its_newest_finding(database_url):
    """The inbox orders by the ratio kept with each problem: problems summed before 0017
    get their newest finding's (at least 1; none or a kind without one: 1)."""
    from sqlalchemy import text

    settings = Settings(database_url=database_url)
    migrate.upgrade(settings, "0016_job_shards")
    engine = make_engine(settings)
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO projects (id, name, created_at, allow_fork_pull_requests, allowed_images) VALUES (1, 'demo', CURRENT_TIMESTAMP, false, '[]')"
                )
            )
            connection.execute(
                text(
                    "INSERT INTO jobs (id, project_id, status, source, command, executor, repeat, notes, created_at) VALUES (1, 1, 'done', 'cli', '[]', 'local', 5, '[]', CURRENT_TIMESTAMP)"
                )
            )
            for finding_id, metrics in ((1, '{"ratio": 2.0}'), (2, '{"ratio": 7.5}'), (3, '{"ratio": 0.5}'), (4, "{}")):
                connection.execute(
                    text(
                        "INSERT INTO findings (id, job_id, kind, severity, title, detail, metrics, evidence_ids, "
                        "fingerprint, status, regression, created_at) VALUES (:id, 1, 'k', 'low', 't', 'd', :metrics, "
                        "'[]', :fp, 'new', false, CURRENT_TIMESTAMP)"
                    ),
                    {"id": finding_id, "metrics": metrics, "fp": "a" if finding_id <= 2 else f"f{finding_id}"},
                )
            for fingerprint, latest in (("a", 2), ("f3", 3), ("f4", 4)):
                connection.execute(
                    text(
                        "INSERT INTO finding_groups (fingerprint, project_id, kind, latest_id, recurrence, first_seen, "
                        "last_seen) VALUES (:fp, 1, 'k', :latest, 1, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
                    ),
                    {"fp": fingerprint, "latest": latest},
                )
        migrate.upgrade(settings)
        with engine.connect() as connection:
            ratios = dict(connection.execute(text("SELECT fingerprint, ratio FROM finding_groups")).all())
        assert ratios == {"a": 7.5, "f3": 1.0, "f4": 1.0}
    finally:
        engine.dispose()


def test_0018_indexes_the_catalogue_search_where_postgresql_has_pg_trgm(database_url):
    """The trigram index exists on PostgreSQL (this server has the contrib extension), not
    on SQLite; a downgrade drops it."""
    settings = Settings(database_url=database_url)
    migrate.upgrade(settings)
    engine = make_engine(settings)
    try:
        names = {index["name"] for index in inspect(engine).get_indexes("test_catalogue")}
        assert ("ix_test_catalogue_test_trgm" in names) == (engine.dialect.name == "postgresql")
        command.downgrade(migrate.alembic_config(settings), "0017_pages_catalogue_order")
        engine.dispose()
        assert "ix_test_catalogue_test_trgm" not in {i["name"] for i in inspect(engine).get_indexes("test_catalogue")}
        migrate.upgrade(settings)
    finally:
        engine.dispose()


def test_0020_fills_the_trend_points_of_catalogued_jobs_as_the_refresh_sums_them(database_url):
    """Jobs catalogued before 0020 get the points the refresh now writes as a job finishes:
    the same branch, run counts and percentiles, to the bit (PostgreSQL's percentile_cont,
    SQLite's aggregate in Python); jobs not yet catalogued get none (their refresh will)."""
    import datetime as dt

    from sqlalchemy import delete, select
    from sqlalchemy.orm import Session

    from services.jobs.summaries import refresh_catalogue
    from services.models import JobSource
    from services.summary_models import CataloguePoint
    from tests.web.sample_data import store_handoff_job

    settings = Settings(database_url=database_url)
    migrate.upgrade(settings)
    engine = make_engine(settings)
    columns = [column for column in CataloguePoint.__table__.columns]
    try:
        with Session(engine) as session:
            start = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
            for n, ref in enumerate(["refs/heads/main", "feature", None]):
                job = store_handoff_job(session, settings, created_at=start + dt.timedelta(days=n))
                session.get(JobSource, job.id).ref = ref
            session.commit()
            assert refresh_catalogue(session, [job.project_id]) == 3
            session.commit()
            store_handoff_job(session, settings)  # finished, not catalogued yet
            session.commit()
            refreshed = session.execute(select(*columns).order_by(*columns)).all()
            assert {row.branch for row in refreshed} == {"main", "feature", ""}
            session.execute(delete(CataloguePoint))
            session.commit()
        command.downgrade(migrate.alembic_config(settings), "0019_pages_findings_by_test")
        migrate.upgrade(settings)
        with Session(engine) as session:
            assert session.execute(select(*columns).order_by(*columns)).all() == refreshed
    finally:
        engine.dispose()


def test_head_is_alembics_single_head():
    # A new migration changes HEAD too: ensure_current trusts it to skip loading Alembic.
    assert migrate.heads(Settings(database_url="sqlite://")) == [migrate.HEAD]


def test_a_database_at_head_is_checked_without_loading_alembic(tmp_path):
    # Alembic's import and script reading cost every `lagtrace run` about 0.25 s of CPU.
    url = f"sqlite:///{tmp_path / 'lagtrace.db'}"
    program = (
        "import sys\n"
        "from services import migrate\n"
        "from services.db import make_engine\n"
        "from services.settings import Settings\n"
        f"settings = Settings(database_url={url!r})\n"
        "migrate.ensure_current(settings, make_engine(settings))\n"
        "print('alembic' in sys.modules)\n"
    )
    first = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    again = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    assert (first.stdout.strip(), again.stdout.strip()) == ("True", "False")
