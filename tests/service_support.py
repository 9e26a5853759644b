"""Shared by the API, worker and end-to-end tests: a git repository to screen, a local
server that speaks GitHub's check-runs API, and signed deliveries."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import zipfile
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cli.service import in_process_dispatcher
from cli.wsgi import create_app
from services import migrate
from services.db import make_engine
from services.github.client import sign
from services.github.repositories import register_repository
from services.settings import Settings
from tests.conftest import EXAMPLES

SECRET = "webhook-test-secret"


def make_repository(path: Path, lagtrace_yml: str | None) -> tuple[str, str]:
    """A git repository holding the examples (and .lagtrace.yml); returns its file:// URL and HEAD."""
    path.mkdir(parents=True)
    for example in ("handoff.py", "steady.py"):
        shutil.copy(EXAMPLES / example, path / example)
    if lagtrace_yml is not None:
        (path / ".lagtrace.yml").write_text(lagtrace_yml)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(path)]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "examples"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    return f"file://{path}", head


@dataclass
class Recorded:
    method: str
    path: str
    body: dict
    headers: dict


@dataclass
class GitHubServer:
    """Answers POST/PATCH /repos/{owner}/{repo}/check-runs[/{id}] as GitHub does, and records them."""

    requests: list[Recorded] = field(default_factory=list)
    url: str = ""
    _server: ThreadingHTTPServer | None = None

    def start(self) -> GitHubServer:
        recorded = self.requests
        next_id = iter(range(1000, 10**6))

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _record(self) -> dict:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                recorded.append(Recorded(self.command, self.path, body, dict(self.headers)))
                return body

            def do_POST(self):
                body = self._record()
                if not self.path.endswith("/check-runs"):
                    return self._answer(404, {"message": "Not Found"})
                self._answer(201, {"id": next(next_id), **body})

            def do_PATCH(self):
                body = self._record()
                check_run_id = int(self.path.rsplit("/", 1)[1])
                self._answer(200, {"id": check_run_id, **body})

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    def check_runs(self) -> list[Recorded]:
        return [r for r in self.requests if "/check-runs" in r.path]


def register(
    settings: Settings,
    session_factory,
    url: str,
    full_name: str = "octo/demo",
    *,
    secret: str | None = SECRET,
    allow_forks: bool = False,
    images: list[str] | None = None,
) -> str:
    """Register ``full_name`` (as `lagtrace repo register` does) with its clone URL and secret."""
    with session_factory() as session:
        _, made = register_repository(
            session,
            settings,
            project=full_name,
            full_name=full_name,
            url=url,
            secret=secret,
            allow_forks=allow_forks,
            images=images,
        )
        session.commit()
    return made


def push_payload(clone_url: str, head: str, full_name: str = "octo/demo") -> dict:
    return {
        "ref": "refs/heads/main",
        "after": head,
        "deleted": False,
        "repository": {"full_name": full_name, "clone_url": clone_url},
    }


def delivery_headers(body: bytes, delivery: str, event: str = "push", secret: str = SECRET) -> dict:
    return {
        "X-Hub-Signature-256": sign(secret, body),
        "X-GitHub-Delivery": delivery,
        "X-GitHub-Event": event,
        "Content-Type": "application/json",
    }


def in_process_service(settings: Settings, *, run_jobs: bool, migrated: bool):
    """The app as `lagtrace serve` makes it without a broker: its jobs run in a thread of
    this process (started only with ``run_jobs``); returns app, engine, sessions, dispatcher."""
    if not migrated:
        migrate.upgrade(settings)
    engine = make_engine(settings)
    dispatcher, session_factory = in_process_dispatcher(settings, engine)
    if run_jobs:
        dispatcher.start()
    return create_app(settings, dispatcher, engine), engine, session_factory, dispatcher


def write_wheel(directory: Path, name: str, version: str) -> Path:
    """A minimal pure-Python wheel, so installing it needs no package index."""
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: lagtrace-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in {**files, f"{info}/RECORD": record}.items():
            archive.writestr(path, text)
    return wheel
