"""How fast the test catalogue is over a long history: 10,000 jobs, 100,000 timing runs
and 10 test results per run (1,000,000 rows) in PostgreSQL, as tests/bench seeds them.

    .venv/bin/python -m tests.web.scale_catalogue --database-url postgresql+psycopg://.../lagtrace_pages_scale

The database is dropped and made afresh. Prints the time of the first refreshes (the
backlog after an upgrade), the list page with each filter, and a test's entry page.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from contextlib import nullcontext

from sqlalchemy import create_engine, insert, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from services import migrate
from services.db import make_engine
from services.jobs import summaries
from services.models import Job, JobConfig, Project, Run, TestResult
from services.settings import Settings
from services.summary_models import CataloguedJob
from tests.bench.seed_dashboard import TESTS_PER_PROJECT, seed
from web import catalogue

TESTS_PER_RUN = 10


def fresh_database(url: str) -> None:
    parsed = make_url(url)
    admin = create_engine(parsed.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{parsed.database}"'))
        connection.execute(text(f'CREATE DATABASE "{parsed.database}"'))
    admin.dispose()


def add_test_results(session: Session) -> int:
    rng = random.Random(11)
    rows = []
    runs = session.execute(select(Run.id, JobConfig.position).join(JobConfig)).all()
    for run_id, position in runs:
        for n in rng.sample(range(TESTS_PER_PROJECT), TESTS_PER_RUN):
            base = 0.02 if position == 0 else 0.02 * (1 + n % 7)
            rows.append(
                {
                    "run_id": run_id,
                    "test_id": f"tests/test_mod{n}.py::test_case",
                    "duration_s": base * rng.uniform(0.9, 1.3),
                    "outcome": "passed",
                }
            )
    for start in range(0, len(rows), 5000):
        session.execute(insert(TestResult), rows[start : start + 5000])
    return len(rows)


def timed(label: str, work, repeat: int = 5):
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - started)
    print(f"{label:48} median {statistics.median(times) * 1000:8.1f} ms  max {max(times) * 1000:8.1f} ms")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--reuse", action="store_true", help="time the queries on the database as it is")
    args = parser.parse_args()
    if not args.reuse:
        fresh_database(args.database_url)
    settings = Settings(database_url=args.database_url)
    migrate.upgrade(settings)
    engine = make_engine(settings)
    started = time.perf_counter()
    with Session(engine) as session:
        if args.reuse:
            counts = {"jobs": session.query(Job).count(), "test_results": session.query(TestResult).count()}
            print(f"reusing {counts}")
    with Session(engine) if not args.reuse else nullcontext() as session:
        if session is not None:
            counts = seed(session, jobs=args.jobs)
            counts["test_results"] = add_test_results(session)
            session.commit()
            with engine.connect() as connection:
                connection.exec_driver_sql("ANALYZE")
                connection.commit()
            print(f"seeded {counts} in {time.perf_counter() - started:.1f} s")
    with Session(engine) as session:
        ids = list(session.scalars(select(Project.id)))
        passes = 0
        started = time.perf_counter()
        slowest = 0.0
        while True:
            batch_started = time.perf_counter()
            done = summaries.refresh_catalogue(session, ids)
            session.commit()
            if not done:
                break
            passes += 1
            slowest = max(slowest, time.perf_counter() - batch_started)
        total = time.perf_counter() - started
        print(
            f"backlog: {session.query(CataloguedJob).count()} jobs in {passes} refreshes of "
            f"{summaries.REFRESH_JOBS}, {total:.1f} s in all, slowest refresh {slowest * 1000:.0f} ms"
        )
        timed("refresh with nothing new", lambda: summaries.refresh_catalogue(session, ids))
        timed("list, all projects, first page", lambda: catalogue.catalogue(session, ids))
        timed("list, page 3", lambda: catalogue.catalogue(session, ids, page=3))
        timed(
            "list, one project + branch + config",
            lambda: catalogue.catalogue(session, ids, project_id=ids[0], branch="", config="cpuset=0-1"),
        )
        timed("list, search 'mod1'", lambda: catalogue.catalogue(session, ids, search="mod1"))
        timed("list, has open findings", lambda: catalogue.catalogue(session, ids, open_only=True))
        timed("filter choices", lambda: catalogue.choices(session, ids))
        project = session.get(Project, ids[0])
        entry = timed(
            "entry: one test, newest 60 jobs",
            lambda: catalogue.test_entry(session, project, "tests/test_mod3.py::test_case"),
        )
        print(f"entry has {len(entry.points)} jobs, {len(entry.findings)} problems")
        newest = session.scalar(select(Job.id).order_by(Job.id.desc()).limit(1))
        print(f"newest job {newest}")
    engine.dispose()


if __name__ == "__main__":
    main()
