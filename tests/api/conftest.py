"""The API in-process (Flask test client) on a real database, with real job execution
by the embedded dispatcher thread."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from flask.testing import FlaskClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from services.accounts.tokens import create_token
from services.jobs.dispatch import InProcessDispatcher
from services.settings import Settings
from tests.service_support import SECRET, GitHubServer, in_process_service


@dataclass
class Api:
    client: FlaskClient
    token: str
    settings: Settings
    session_factory: sessionmaker[Session]
    dispatcher: InProcessDispatcher

    @property
    def auth(self) -> dict:
        return {"Authorization": f"Bearer {self.token}"}

    def get(self, path: str, **kwargs):
        return self.client.get(path, headers=self.auth, **kwargs)

    def post(self, path: str, **kwargs):
        return self.client.post(path, headers={**self.auth, **kwargs.pop("headers", {})}, **kwargs)

    def wait(self, job_id: int, timeout_s: float = 120) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            job = self.get(f"/api/v1/jobs/{job_id}").get_json()
            if job["report"] is not None:
                return job
            time.sleep(0.1)
        raise AssertionError(f"job {job_id} did not finish in {timeout_s} s: {job}")

    def count(self, model) -> int:
        with self.session_factory() as session:
            return session.scalar(select(func.count()).select_from(model))

    def new_token(self, project: str) -> str:
        with self.session_factory() as session:
            token = create_token(session, project)
            session.commit()
            return token


@pytest.fixture
def github_server():
    server = GitHubServer().start()
    yield server
    server.stop()


def build_api(
    database_url: str, tmp_path: Path, github_url: str, *, run_jobs: bool = True, migrated: bool = False, **overrides
) -> Api:
    settings = Settings(
        database_url=database_url,
        work_dir=tmp_path / "work",
        artifact_dir=tmp_path / "artifacts",
        allow_file_repositories=True,
        # The tests name made-up https hosts (example.com) that are never cloned.
        repository_hosts=["*"],
        github_webhook_secret=SECRET,
        github_api_url=github_url,
        github_token="test-token",
        public_url="http://lagtrace.test",
        **overrides,
    )
    app, engine, session_factory, dispatcher = in_process_service(settings, run_jobs=run_jobs, migrated=migrated)
    with session_factory() as session:
        token = create_token(session, "demo", "alice")
        session.commit()
    api = Api(app.test_client(), token, settings, session_factory, dispatcher)
    api.engine = engine
    return api


@pytest.fixture
def api(database_url, tmp_path, github_server):
    made = build_api(database_url, tmp_path, github_server.url)
    yield made
    made.dispatcher.stop(timeout=30)
    made.engine.dispose()


@pytest.fixture
def sqlite_api(sqlite_url, tmp_path, github_server, migrated_sqlite):
    """For tests that exercise only request handling: SQLite, and nothing runs the jobs."""
    shutil.copy(migrated_sqlite, sqlite_url.removeprefix("sqlite:///"))
    made = build_api(sqlite_url, tmp_path, github_server.url, run_jobs=False, migrated=True)
    yield made
    made.engine.dispose()
