"""The service as an attacker meets it: the API and dashboard in-process, jobs run by the
real step code on a thread, in containers of the real Docker engine (docker only, the
service's default). Each test performs an attack and asserts it fails."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from flask.testing import FlaskClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from services.accounts.tokens import create_token
from services.accounts.users import create_user
from services.jobs.dispatch import InProcessDispatcher
from services.measure.executors.docker_engine import unavailable_reason
from services.settings import Settings
from tests.conftest import require
from tests.service_support import SECRET, GitHubServer, delivery_headers, in_process_service

PASSWORD = "correct horse battery"
# Values of the worker's secrets that must never appear in anything a job can see.
SECRET_KEY_CANARY = "secret-key-canary-81c2"
GITHUB_TOKEN_CANARY = "ghp_canary_4e9a"


@dataclass
class Service:
    client: FlaskClient
    settings: Settings
    session_factory: sessionmaker[Session]
    dispatcher: InProcessDispatcher
    token: str
    github: GitHubServer

    @property
    def auth(self) -> dict:
        return {"Authorization": f"Bearer {self.token}"}

    def submit(self, body: dict, token: str | None = None):
        return self.client.post("/api/v1/jobs", json=body, headers={"Authorization": f"Bearer {token or self.token}"})

    def upload(self, archive: bytes, job: dict):
        return self.client.post(
            "/api/v1/jobs",
            data={"job": json.dumps(job), "archive": (__import__("io").BytesIO(archive), "code.tgz")},
            content_type="multipart/form-data",
            headers=self.auth,
        )

    def job(self, job_id: int, token: str | None = None) -> dict:
        return self.client.get(
            f"/api/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {token or self.token}"}
        ).get_json()

    def wait(self, job_id: int, timeout_s: float = 180, token: str | None = None) -> dict:
        deadline = time.monotonic() + timeout_s
        job: dict = {}
        while time.monotonic() < deadline:
            job = self.job(job_id, token)
            if job["report"] is not None:
                return job
            time.sleep(0.1)
        raise AssertionError(f"job {job_id} did not finish in {timeout_s} s: {job}")

    def deliver(self, payload: dict, delivery: str, event: str = "push", secret: str = SECRET):
        body = json.dumps(payload).encode()
        return self.client.post(
            "/api/v1/webhooks/github", data=body, headers=delivery_headers(body, delivery, event, secret)
        )

    def count(self, model) -> int:
        with self.session_factory() as session:
            return session.scalar(select(func.count()).select_from(model))

    def new_token(self, project: str) -> str:
        with self.session_factory() as session:
            token = create_token(session, project)
            session.commit()
            return token

    def add_user(self, username: str, projects: list[str]) -> None:
        with self.session_factory() as session:
            create_user(session, username, PASSWORD, projects=projects)
            session.commit()


def docker_ready(settings: Settings) -> None:
    problem = unavailable_reason(settings.docker_image)
    require(problem is None, f"the security tests attack the real Docker executor: {problem}")


def build_service(
    sqlite_url: str, tmp_path: Path, github: GitHubServer, migrated_sqlite: Path, *, run_jobs: bool = True, **overrides
) -> Service:
    shutil.copy(migrated_sqlite, sqlite_url.removeprefix("sqlite:///"))
    tmp_path.chmod(0o755)  # the container's uid 1000 reads checkouts below it
    defaults = {
        "database_url": sqlite_url,
        "work_dir": tmp_path / "work",
        "artifact_dir": tmp_path / "artifacts",
        "allow_file_repositories": True,
        "repository_hosts": ["*"],
        "github_webhook_secret": SECRET,
        "github_api_url": github.url,
        "github_token": GITHUB_TOKEN_CANARY,
        "secret_key": SECRET_KEY_CANARY,
        "public_url": "http://lagtrace.test",
    }
    settings = Settings(**{**defaults, **overrides})
    app, engine, session_factory, dispatcher = in_process_service(settings, run_jobs=run_jobs, migrated=True)
    with session_factory() as session:
        token = create_token(session, "octo/demo", "mallory")
        session.commit()
    made = Service(app.test_client(), settings, session_factory, dispatcher, token, github)
    made.engine = engine  # type: ignore[attr-defined]
    return made


@pytest.fixture
def github_server():
    server = GitHubServer().start()
    yield server
    server.stop()


@pytest.fixture
def make_service(sqlite_url, tmp_path, github_server, migrated_sqlite):
    made: list[Service] = []

    def make(*, run_jobs: bool = True, **overrides) -> Service:
        service = build_service(sqlite_url, tmp_path, github_server, migrated_sqlite, run_jobs=run_jobs, **overrides)
        if run_jobs:
            docker_ready(service.settings)
        made.append(service)
        return service

    yield make
    for service in made:
        if service.dispatcher._thread.ident is not None:  # started (it ran jobs)
            service.dispatcher.stop(timeout=60)
        service.engine.dispose()  # type: ignore[attr-defined]


@pytest.fixture
def service(make_service) -> Service:
    return make_service()


@pytest.fixture
def front_door(make_service) -> Service:
    """Only request handling (no job runs): attacks on the API and the sign-in page."""
    return make_service(run_jobs=False)
