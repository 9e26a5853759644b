"""Shared fixtures: real databases (SQLite and PostgreSQL), settings, the CLI as a process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.orm import Session

from services import migrate
from services.db import make_engine, make_session_factory
from services.settings import Settings
from tests.support.xdist import WORKER, own_redis

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
IN_CI = os.environ.get("CI") == "true"
# Programs under test run on the real interpreter: a version manager's shim (pyenv's
# costs ~0.15 s of CPU per start) would add start-up CPU that a quota then throttles.
PYTHON = sys.executable


@pytest.fixture(scope="session", autouse=True)
def worker_data_dir(tmp_path_factory) -> Iterator[None]:
    """An xdist worker's own lagtrace data directory (tests/support/xdist.py says why)."""
    if WORKER is None:
        yield
        return
    before = os.environ.get("XDG_DATA_HOME")
    os.environ["XDG_DATA_HOME"] = str(tmp_path_factory.mktemp("xdg-data"))
    yield
    if before is None:
        os.environ.pop("XDG_DATA_HOME", None)
    else:
        os.environ["XDG_DATA_HOME"] = before


def require(condition: bool, reason: str) -> None:
    """Skip locally when a service is missing; in CI a missing service is a failure."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"CI=true but {reason}", pytrace=False)
    pytest.skip(f"{reason} (run `make test`, which provisions it)")


_PROVISIONED: dict[str, str | None] = {}


def provisioned(tool: str, variable: str) -> str:
    """The chart's tooling (``helm``: a binary's path; ``image``: the service image): from
    ``variable`` when set, else made now by .ci/provision-chart.sh (cached per machine, so
    only the first call builds), which .ci/provision.sh leaves out. A tool that cannot be
    made skips locally, with the script's reason, and fails in CI (``require``)."""
    if os.environ.get(variable):
        return os.environ[variable]
    if tool not in _PROVISIONED:
        done = subprocess.run(
            [str(REPO / ".ci" / "provision-chart.sh"), tool], cwd=REPO, capture_output=True, text=True, timeout=3600
        )
        _PROVISIONED[tool] = done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None
        if _PROVISIONED[tool] is None:
            _PROVISIONED[f"{tool}:error"] = done.stderr.strip()[-2000:]
    made = _PROVISIONED[tool]
    require(
        made is not None,
        f"{variable} is not set and .ci/provision-chart.sh {tool} failed: {_PROVISIONED.get(f'{tool}:error')}",
    )
    return str(made)


@pytest.fixture(scope="session")
def postgres_server_url() -> str:
    url = os.environ.get("LAGTRACE_TEST_POSTGRES_URL")
    require(bool(url), "LAGTRACE_TEST_POSTGRES_URL is not set: no PostgreSQL server")
    return url


@pytest.fixture
def postgres_url(postgres_server_url: str):
    """A fresh, empty database on the real server for one test, dropped afterwards."""
    name = f"lagtrace_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(postgres_server_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    base, _, _ = postgres_server_url.rpartition("/")
    yield f"{base}/{name}"
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def migrated_postgres_engine(postgres_server_url: str):
    """One database on the real server, migrated once per test session (db_session rolls
    each test's writes back)."""
    name = f"lagtrace_session_{uuid.uuid4().hex[:12]}"
    admin = create_engine(postgres_server_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    base, _, _ = postgres_server_url.rpartition("/")
    settings = Settings(database_url=f"{base}/{name}")
    migrate.upgrade(settings)
    engine = make_engine(settings)
    yield engine
    engine.dispose()
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_session(request, tmp_path: Path, migrated_sqlite: Path):
    """A session on a migrated database for tests that use one session.

    PostgreSQL: the session-wide database, inside one outer transaction per test; the
    session's commits are savepoints in it, and the outer rollback undoes them all.
    SQLite: a copy of the migrated file (its driver's savepoints are not reliable).
    """
    if request.param == "sqlite":
        path = tmp_path / "lagtrace.db"
        shutil.copy(migrated_sqlite, path)
        engine: Engine = make_engine(Settings(database_url=f"sqlite:///{path}"))
        with make_session_factory(engine)() as session:
            yield session
        engine.dispose()
        return
    engine = request.getfixturevalue("migrated_postgres_engine")
    with engine.connect() as connection:
        outer = connection.begin()
        session = Session(bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False)
        try:
            yield session
        finally:
            session.close()
            outer.rollback()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'lagtrace.db'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'lagtrace.db'}"


@pytest.fixture
def settings(sqlite_url: str, tmp_path: Path) -> Settings:
    return Settings(database_url=sqlite_url, artifact_dir=tmp_path / "artifacts")


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str

    def report(self, path: Path) -> dict:
        return json.loads(path.read_text())


# The lagtrace processes this test process started: a container left by a dead one is
# this process's to answer for (tests/services/measure/executors/test_docker.py), one
# left by another xdist worker's is not.
CLI_PIDS: set[int] = set()


def run_cli(
    args: list[str], database_url: str, cwd: Path | None = None, timeout: float = 300, env: dict | None = None
) -> CliResult:
    """`lagtrace ARGS` as a separate process, as a user would run it."""
    env = {**os.environ, "LAGTRACE_DATABASE_URL": database_url, **(env or {})}
    with subprocess.Popen(
        [sys.executable, "-m", "cli.main", *args],
        cwd=cwd or REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        CLI_PIDS.add(process.pid)
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise
    return CliResult(process.returncode, stdout, stderr)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory) -> Iterator[str]:
    """The test Redis (.ci/redis.sh); each test uses its own database number where it matters.
    An xdist worker gets a Redis server of its own, since the numbers are fixed per test
    (tests/support/xdist.py)."""
    url = os.environ.get("LAGTRACE_TEST_REDIS_URL")
    require(bool(url), "LAGTRACE_TEST_REDIS_URL is not set: no Redis server")
    if WORKER is None:
        yield url
        return
    with own_redis(tmp_path_factory.mktemp("redis")) as own:
        os.environ["LAGTRACE_TEST_REDIS_URL"] = own
        try:
            yield own
        finally:
            os.environ["LAGTRACE_TEST_REDIS_URL"] = url


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory) -> Path:
    """One migrated SQLite file, copied by each test: migrating per test costs 0.5 s."""
    path = tmp_path_factory.mktemp("template") / "lagtrace.db"
    migrate.upgrade(Settings(database_url=f"sqlite:///{path}"))
    return path
