"""Where `lagtrace submit` sends its API token (cli/submit.py): never unencrypted to another
machine, and never on to another origin a server redirects it to. Real HTTP servers on
127.0.0.1 record the headers they were sent."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cli.submit import ApiClient
from services.errors import BadInput
from tests.conftest import run_cli

TOKEN = "lt_secret_token_for_this_test"
QUEUED = {
    "id": 1,
    "status": "queued",
    "report": None,
    "progress": {"phase": "queued", "runs_done": 0, "runs_planned": 1},
}


@contextlib.contextmanager
def server(answer: Callable[[BaseHTTPRequestHandler], tuple[int, dict[str, str], dict]]) -> Iterator[tuple[int, list]]:
    """An HTTP server on 127.0.0.1 answering every request with ``answer(request)``:
    (status, headers, JSON body). Yields its port and the (method, path, headers) it got."""
    seen: list[tuple[str, str, dict[str, str]]] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            seen.append((self.command, self.path, dict(self.headers)))
            status, headers, body = answer(self)
            data = json.dumps(body).encode()
            self.send_response(status)
            for name, value in {**headers, "Content-Type": "application/json"}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._answer()

        def do_POST(self) -> None:
            self._answer()

        def log_message(self, format, *args) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1], seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def authorizations(seen: list) -> list[str | None]:
    return [headers.get("Authorization") for _, _, headers in seen]


def needs_token(request: BaseHTTPRequestHandler) -> tuple[int, dict[str, str], dict]:
    if request.headers.get("Authorization") != f"Bearer {TOKEN}":
        return 401, {}, {"error": "missing or invalid API token"}
    return 200, {}, QUEUED


def test_a_redirect_to_another_origin_does_not_carry_the_token(sqlite_url, tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "test_x.py").write_text("def test_x():\n    pass\n")
    # Another origin does not know this token: it refuses with or without it.
    with server(lambda request: (401, {}, {"error": "missing or invalid API token"})) as (other, other_seen):
        # The job is made on 127.0.0.1; following it, the API redirects to localhost: the
        # same machine, another host name, so another origin.
        def api(request):
            if request.command == "POST":
                return 201, {}, QUEUED
            return 307, {"Location": f"http://localhost:{other}{request.path}"}, {}

        with server(api) as (port, seen):
            options = ["--token", TOKEN, "--dir", str(code), "--poll", "0.05"]
            done = run_cli(
                ["submit", "--url", f"http://127.0.0.1:{port}", *options, "--", "pytest"],
                sqlite_url,
                timeout=60,
            )
    assert [(method, path) for method, path, _ in seen] == [("POST", "/api/v1/jobs"), ("GET", "/api/v1/jobs/1")]
    assert authorizations(seen) == [f"Bearer {TOKEN}"] * 2
    # urllib's own redirect handler would have sent it on: the other server was asked without it.
    assert [(method, path) for method, path, _ in other_seen] == [("GET", "/api/v1/jobs/1")]
    assert authorizations(other_seen) == [None]
    assert TOKEN not in json.dumps(other_seen)
    assert done.returncode == 2 and "missing or invalid API token" in done.stderr, done.stderr


def test_a_redirect_on_the_same_origin_keeps_the_token():
    def api(request):
        if request.path == "/api/v1/jobs/1":
            return 307, {"Location": "/api/v1/jobs/1/"}, {}
        return needs_token(request)

    with server(api) as (port, seen):
        job = ApiClient(f"http://127.0.0.1:{port}", TOKEN, connect_wait_s=0).request("GET", "/api/v1/jobs/1")
    assert job == QUEUED
    assert [path for _, path, _ in seen] == ["/api/v1/jobs/1", "/api/v1/jobs/1/"]
    assert authorizations(seen) == [f"Bearer {TOKEN}"] * 2


def test_the_token_is_not_sent_over_http_to_another_machine(sqlite_url, tmp_path):
    started = time.monotonic()
    done = run_cli(
        ["submit", "--url", "http://example.invalid:8080", "--token", TOKEN, "--dir", str(tmp_path), "--", "pytest"],
        sqlite_url,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "--url http://example.invalid:8080" in done.stderr and "use https://" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "cannot reach" not in done.stderr and "waiting" not in done.stderr
    assert time.monotonic() - started < 20  # refused, not tried (a lookup, a connect wait)


@pytest.mark.parametrize(
    "url",
    [
        "https://lagtrace.example.com",
        "http://localhost:8080",
        "http://ci.localhost",
        "http://127.0.0.2:80",
        "http://[::1]:8080",
    ],
)
def test_https_anywhere_and_http_to_this_machine_are_allowed(url):
    ApiClient(url, TOKEN)


@pytest.mark.parametrize(
    "url", ["http://10.0.0.5:8080", "http://localhost.example.com", "http://[::2]", "ftp://localhost", "127.0.0.1:8080"]
)
def test_http_to_another_machine_and_other_schemes_are_refused(url):
    with pytest.raises(BadInput, match=r"^--url"):
        ApiClient(url, TOKEN)
