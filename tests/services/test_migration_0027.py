"""0027 sums the catalogue of the jobs catalogued before it again as the refresh now sums
it: a gate's runs in, a failed run counted, not timed (tests/web/test_trend.py)."""

from alembic import command
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from services import migrate
from services.db import make_engine
from services.jobs.summaries import refresh_catalogue
from services.settings import Settings
from services.summary_models import CatalogueEntry, CataloguePoint
from tests.web.trend_data import store_gated_branch


def test_0027_sums_the_catalogued_jobs_again_as_the_refresh_sums_them(database_url):
    settings = Settings(database_url=database_url)
    migrate.upgrade(settings)
    engine = make_engine(settings)
    points = list(CataloguePoint.__table__.columns)
    entries = [column for column in CatalogueEntry.__table__.columns if column.name != "id"]
    try:
        with Session(engine) as session:
            jobs = store_gated_branch(session, settings)
            session.commit()
            assert refresh_catalogue(session, [1]) == len(jobs["matrix"]) + len(jobs["gates"])
            session.commit()
            refreshed = session.execute(select(*points).order_by(*points)).all()
            listed = session.execute(select(*entries).order_by(*entries)).all()
            assert any(row.failures for row in refreshed) and any(row.p50_s is None for row in refreshed)
            # What a catalogue summed before 0027 looked like: no point, no entry is right.
            session.execute(delete(CataloguePoint))
            session.execute(delete(CatalogueEntry))
            session.commit()
        command.downgrade(migrate.alembic_config(settings), "0026_matrix_schedules")
        migrate.upgrade(settings)
        with Session(engine) as session:
            again = session.execute(select(*points).order_by(*points)).all()
            keys = [column.name for column in points if column.name not in ("p50_s", "p95_s")]
            assert [[row._mapping[k] for k in keys] for row in again] == [
                [row._mapping[k] for k in keys] for row in refreshed
            ]
            # The percentiles as the refresh interpolates them (percentile_cont on PostgreSQL).
            for made, summed in zip(again, refreshed, strict=True):
                for name in ("p50_s", "p95_s"):
                    value, expected = getattr(made, name), getattr(summed, name)
                    assert (value is None) == (expected is None)
                    assert value is None or abs(value - expected) < 1e-12
            assert session.execute(select(*entries).order_by(*entries)).all() == listed
    finally:
        engine.dispose()
