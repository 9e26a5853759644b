"""The prepare step runs the repository's own code (pip), before any measured run: it
gets no network unless the operator opts in, a time limit, none of the worker's package
credentials, and an image cache that one project cannot plant for another."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from services.errors import LagtraceError
from services.jobs.workspace import cache_scope
from services.measure.executors.docker import DockerExecutor
from services.models import Job, JobSource, Project
from services.settings import Settings
from tests.security.conftest import docker_ready
from tests.service_support import write_wheel


class Index:
    """A package index on the host's loopback that records who reached it (and can hang)."""

    def __init__(self, hang_s: float = 0.0):
        self.requests: list[str] = []
        hits, hang = self.requests, hang_s

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                hits.append(self.path)
                time.sleep(hang)
                self.send_response(404)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def workdir(tmp_path) -> Path:
    tmp_path.chmod(0o755)
    directory = tmp_path / "code"
    directory.mkdir()
    return directory


def executor(tmp_path: Path, **overrides) -> DockerExecutor:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'x.db'}", **overrides)
    docker_ready(settings)
    return DockerExecutor(settings, cache_scope=f"test-{time.time_ns()}")


def test_the_prepare_step_has_no_network_by_default(workdir, tmp_path, monkeypatch):
    # The environment of this machine's tests opts in to the host network; the default is none.
    monkeypatch.delenv("LAGTRACE_DOCKER_PREPARE_NETWORK", raising=False)
    assert Settings().docker_prepare_network == "none"
    index = Index()
    try:
        # A requirements file that points pip at a service on the worker's loopback (as
        # the database and the broker are): with the host network it would be reached.
        (workdir / "requirements.txt").write_text(f"--index-url {index.url}\nlagtrace-no-such-package\n")
        with pytest.raises(LagtraceError, match="installing the dependencies failed"):
            executor(tmp_path, docker_prepare_network="none").prepare(workdir, lambda m: None)
        assert index.requests == []
        # The control: the opt-in network does reach it, so the test can tell.
        with pytest.raises(LagtraceError, match="installing the dependencies failed"):
            executor(tmp_path, docker_prepare_network="host").prepare(workdir, lambda m: None)
        assert index.requests
    finally:
        index.close()


def test_the_prepare_step_is_stopped_at_its_time_limit(workdir, tmp_path):
    index = Index(hang_s=60)
    try:
        (workdir / "requirements.txt").write_text(f"--index-url {index.url}\nlagtrace-no-such-package\n")
        started = time.perf_counter()
        with pytest.raises(LagtraceError, match="took more than 3 s"):
            executor(tmp_path, docker_prepare_network="host", docker_prepare_timeout_s=3).prepare(
                workdir, lambda m: None
            )
        assert time.perf_counter() - started < 20
    finally:
        index.close()


def test_the_workers_index_credentials_are_not_forwarded(workdir, tmp_path, monkeypatch):
    index = Index()
    try:
        # The worker's own pip configuration, with a password in it, must not reach the job.
        monkeypatch.setenv("PIP_INDEX_URL", index.url.replace("http://", "http://ci:s3cret-pw@"))
        monkeypatch.setenv("PIP_EXTRA_INDEX_URL", index.url)
        (workdir / "requirements.txt").write_text("lagtrace-no-such-package\n")
        with pytest.raises(LagtraceError):
            executor(tmp_path, docker_prepare_network="host").prepare(workdir, lambda m: None)
        assert index.requests == []
    finally:
        index.close()
    with pytest.raises(ValueError, match="without user or password"):
        Settings(package_index_url="https://ci:pw@pypi.example/simple")


def test_dependency_images_are_keyed_by_project(workdir, tmp_path):
    wheel = write_wheel(workdir, "lagtrace_scoped_dep", f"1.0.{time.time_ns()}")
    (workdir / "requirements.txt").write_text(f"./{wheel.name}\n")
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'x.db'}", docker_prepare_network="none")
    docker_ready(settings)
    first = DockerExecutor(settings, cache_scope="project-1")
    second = DockerExecutor(settings, cache_scope="project-2")
    first.prepare(workdir, lambda m: None)
    try:
        second.prepare(workdir, lambda m: None)
        try:
            # Same requirements, other project: its own install, never the first one's image.
            assert first.run_image != second.run_image
            labels = first.client.images.get(second.run_image).labels
            assert labels["lagtrace.deps.scope"] == "project-2"
        finally:
            first.client.images.remove(second.run_image, force=True)
    finally:
        first.client.images.remove(first.run_image, force=True)


def test_a_forks_pull_request_prepares_where_no_trusted_job_looks(workdir, tmp_path):
    """A fork that edits what its install reads, and builds the key first, plants nothing
    in the image a push to the default branch then measures in: the fork's install goes to
    a scope of its own, per pull request."""
    project = Project(id=7, name="octo/scoped")
    push = JobSource(kind="git", branch="main")
    fork = JobSource(kind="git", branch="main", config_commit_sha="a" * 40, pull_request_number=12)
    other_fork = JobSource(kind="git", branch="feature", config_commit_sha="b" * 40, pull_request_number=13)
    scopes = [
        cache_scope(Job(id=n, project_id=project.id), source) for n, source in enumerate((push, fork, other_fork))
    ]
    # The fork's pull request names its branch like the base's: the scope is not the branch's.
    assert scopes == ["project-7", "project-7-fork-pr12", "project-7-fork-pr13"], scopes

    # The fork's install runs first and plants a sitecustomize in its venv.
    planted = write_wheel(workdir, "sitecustomize", f"1.0.{time.time_ns()}")
    (workdir / "requirements.txt").write_text(f"./{planted.name}\n")
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'x.db'}", docker_prepare_network="none")
    docker_ready(settings)
    forked = DockerExecutor(settings, cache_scope=scopes[1])
    forked.prepare(workdir, lambda m: None)
    trusted = DockerExecutor(settings, cache_scope=scopes[0])
    said: list[str] = []
    try:
        # The same tree on main: installed afresh ("installing"), never served the fork's image.
        trusted.prepare(workdir, said.append)
        try:
            assert trusted.run_image != forked.run_image
            assert any(line.startswith("installing dependencies") for line in said), said
            assert forked.client.images.get(trusted.run_image).labels["lagtrace.deps.scope"] == "project-7"
        finally:
            forked.client.images.remove(trusted.run_image, force=True)
    finally:
        forked.client.images.remove(forked.run_image, force=True)
