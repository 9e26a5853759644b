"""Dashboard pages over a big history: 10,000 jobs and 100,000 runs in PostgreSQL
(seeded by tests/bench/seed_dashboard.py). Target: every page under 300 ms (median).

    .venv/bin/python -m tests.bench.bench_dashboard [--repeat 15]

Uses LAGTRACE_TEST_POSTGRES_URL (make test's server): a scratch database is made,
migrated, seeded, measured through the real WSGI app (sign-in cookie, templates,
queries), and dropped.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
import uuid

from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from cli.wsgi import create_app
from services import migrate
from services.accounts.users import create_user
from services.db import make_engine
from services.jobs.dispatch import InProcessDispatcher
from services.settings import Settings
from tests.bench.seed_dashboard import seed

TARGET_S = 0.300
PASSWORD = "bench-password"
PAGES = {
    "inbox (all projects)": "/",
    "inbox (one project, status new)": "/?project={project}&status=new",
    "inbox (kind cpu_sensitivity)": "/?kind=cpu_sensitivity",
    "job list (all projects)": "/jobs",
    "job list (one project, done)": "/jobs?project={project}&status=done",
    "job list (page 100)": "/jobs?before={deep}",
}


def measure(client, path: str, repeat: int) -> list[float]:
    client.get(path)  # warm the template cache and the database's buffers
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        response = client.get(path)
        times.append(time.perf_counter() - started)
        assert response.status_code == 200, (path, response.status_code)
    return times


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--jobs", type=int, default=10_000)
    args = parser.parse_args()
    server = os.environ.get("LAGTRACE_TEST_POSTGRES_URL")
    if not server:
        print("LAGTRACE_TEST_POSTGRES_URL is not set (source .state/test.env after .ci/provision.sh)")
        return 2
    name = f"lagtrace_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = f"{server.rsplit('/', 1)[0]}/{name}"
    try:
        settings = Settings(database_url=url, secret_key="bench")
        migrate.upgrade(settings)
        engine = make_engine(settings)
        started = time.perf_counter()
        with Session(engine) as session:
            counts = seed(session, jobs=args.jobs)
            create_user(session, "bench", PASSWORD, projects=[], admin=True)
            session.commit()
        with engine.connect() as connection:
            connection.exec_driver_sql("ANALYZE")
            connection.commit()
            project = connection.exec_driver_sql("SELECT id FROM projects ORDER BY id LIMIT 1").scalar()
            deep = connection.exec_driver_sql("SELECT max(id) - 5000 FROM jobs").scalar()
        print(f"seeded {counts} in {time.perf_counter() - started:.1f} s")
        app = create_app(settings, InProcessDispatcher(lambda step: None), engine)
        client = app.test_client()
        token = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/sign-in").get_data(as_text=True))[1]
        assert (
            client.post("/sign-in", data={"username": "bench", "password": PASSWORD, "csrf_token": token}).status_code
            == 302
        )
        failed = []
        for label, path in PAGES.items():
            times = measure(client, path.format(project=project, deep=deep), args.repeat)
            median = statistics.median(times)
            print(
                f"{label:34} median {median * 1000:6.1f} ms  (min {min(times) * 1000:.1f}, "
                f"max {max(times) * 1000:.1f}, n={len(times)})"
            )
            if median > TARGET_S:
                failed.append(label)
        engine.dispose()
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    if failed:
        print(f"over {TARGET_S * 1000:.0f} ms: {', '.join(failed)}")
        return 1
    print(f"all pages under {TARGET_S * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
