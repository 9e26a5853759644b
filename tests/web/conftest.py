"""The dashboard in-process (Flask test client) on a real database, mounted into the API app."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from flask.testing import FlaskClient
from sqlalchemy.orm import Session, sessionmaker

from services.accounts.users import create_user
from services.jobs.dispatch import InProcessDispatcher
from services.settings import Settings
from tests.service_support import in_process_service

PASSWORD = "correct horse battery"
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@dataclass
class Dashboard:
    client: FlaskClient
    settings: Settings
    session_factory: sessionmaker[Session]
    dispatcher: InProcessDispatcher

    def add_user(self, username: str, projects: list[str], admin: bool = False) -> None:
        with self.session_factory() as session:
            create_user(session, username, PASSWORD, projects=projects, admin=admin)
            session.commit()

    def csrf(self, path: str = "/sign-in") -> str:
        page = self.client.get(path)
        found = CSRF.search(page.get_data(as_text=True))
        assert found, f"no CSRF token on {path}: {page.status_code}"
        return found.group(1)

    def sign_in(self, username: str, password: str = PASSWORD):
        return self.client.post(
            "/sign-in", data={"username": username, "password": password, "csrf_token": self.csrf()}
        )

    def post(self, path: str, data: dict, form_page: str = "/"):
        return self.client.post(path, data={**data, "csrf_token": self.csrf(form_page)})

    def page(self, path: str) -> str:
        response = self.client.get(path)
        assert response.status_code == 200, (path, response.status_code, response.get_data(as_text=True)[:2000])
        return response.get_data(as_text=True)


def build_dashboard(database_url: str, tmp_path: Path, *, run_jobs: bool, migrated: bool = False) -> Dashboard:
    settings = Settings(
        database_url=database_url,
        work_dir=tmp_path / "work",
        artifact_dir=tmp_path / "artifacts",
        allow_file_repositories=True,
        # The tests name made-up https hosts (example.com) that are never cloned.
        repository_hosts=["*"],
        secret_key="test-secret-key",
    )
    app, engine, session_factory, dispatcher = in_process_service(settings, run_jobs=run_jobs, migrated=migrated)
    made = Dashboard(app.test_client(), settings, session_factory, dispatcher)
    made.engine = engine
    return made


@pytest.fixture
def dashboard(sqlite_url, tmp_path, migrated_sqlite):
    """SQLite and no job execution: for pages over data the test stores itself."""
    shutil.copy(migrated_sqlite, sqlite_url.removeprefix("sqlite:///"))
    made = build_dashboard(sqlite_url, tmp_path, run_jobs=False, migrated=True)
    yield made
    made.engine.dispose()


@pytest.fixture
def running_dashboard(database_url, tmp_path):
    """Both databases, with the embedded job thread running submitted jobs for real."""
    made = build_dashboard(database_url, tmp_path, run_jobs=True)
    yield made
    made.dispatcher.stop(timeout=60)
    made.engine.dispose()
