"""The service under load on loopback: `lagtrace serve` (API and dashboard, one process)
over PostgreSQL seeded with 10,000 jobs, 100,000 runs and 1,000,000 test results, one of
them a 5,000-test suite (tests/bench/seed_dashboard.py), 20 concurrent clients with
keep-alive connections. Six phases, each its own distribution: API reads (job list, job
detail, the 5,000-test job's detail, findings), the inbox (plain and filtered), the job
lists (filtered, a deep page), the job page (the 5,000-test job's, an ordinary one's), the
test catalogue (list, search, a deep page, a test's history), and signed GitHub push
deliveries (each stores a job and queues it on Redis; no worker runs, so nothing else takes
the CPU). Target: p95 under 300 ms.

    .venv/bin/python -m tests.bench.run --only service [--quick]
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import urlsplit

import redis
import requests
from sqlalchemy import text
from sqlalchemy.orm import Session

from services.db import make_engine
from services.github.client import sign
from services.jobs.summaries import refresh_catalogue as catalogue_refresh
from services.jobs.summaries import store_report
from services.models import Job
from services.settings import Settings
from services.thresholds import Thresholds
from tests.bench.common import LAGTRACE, REPO, BenchError, redis_server_url, scratch_database, scratch_dir
from tests.bench.figures import quantile_figure, rate_figure
from tests.bench.seed_dashboard import seed

CLIENTS = 20
TARGET_MS = 300
PASSWORD = "bench-password"
SECRET = "bench-webhook-secret"
# A Redis database of its own (the e2e stacks go round 1-15 from 1), flushed afterwards.
REDIS_DATABASE = 15
CLONE_URL = "https://git.example/octo/api.git"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _cli(env: dict, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [*LAGTRACE, *args], cwd=REPO, env=env, input=stdin, capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        raise BenchError(f"lagtrace {' '.join(args)} exited {done.returncode}: {done.stderr[-1000:]}")
    return done.stdout.strip()


class Client:
    """One keep-alive HTTP/1.1 connection and its cookies: what a browser tab sends, with
    none of `requests`' per-request machinery (hooks, adapters, a cookie jar's policy),
    which cost the shared CPUs 2-3 ms a request, as much as a fifth of what the server
    spent. Each request is still timed from before it is sent to its whole body read."""

    def __init__(self, base: str, headers: dict[str, str] | None = None, cookies: dict[str, str] | None = None):
        where = urlsplit(base)
        self.connection = http.client.HTTPConnection(where.hostname or "127.0.0.1", where.port, timeout=60)
        self.headers = dict(headers or {})
        self.cookies = dict(cookies or {})

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None):
        sent = {**self.headers, **(headers or {})}
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{name}={value}" for name, value in self.cookies.items())
        try:
            self.connection.request(method, path, body=body, headers=sent)
            response = self.connection.getresponse()
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
            # The server closed an idle keep-alive connection: open a new one, as a browser does.
            self.connection.close()
            self.connection.request(method, path, body=body, headers=sent)
            response = self.connection.getresponse()
        content = response.read()  # the whole body, as a browser would read it
        for header in response.headers.get_all("Set-Cookie") or []:
            for name, morsel in SimpleCookie(header).items():
                self.cookies[name] = morsel.value
        return response.status, content

    def get(self, path: str) -> tuple[int, bytes]:
        return self.request("GET", path)


def _load(clients: list[Client], seconds: float, request: Callable[[Client, int], None]) -> list[float]:
    """Every client sends requests back to back for ``seconds``; returns every latency."""
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds

    def client(session: Client, number: int) -> None:
        mine = []
        count = number
        while time.perf_counter() < deadline and not errors:
            started = time.perf_counter()
            try:
                request(session, count)
            except Exception as exc:  # surfaced below: a broken benchmark, not a slow one
                errors.append(f"{type(exc).__name__}: {exc}")
                break
            mine.append(time.perf_counter() - started)
            count += len(clients)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client, args=(s, n)) for n, s in enumerate(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise BenchError(f"{len(errors)} request(s) failed, the first: {errors[0]}")
    return latencies


def _get(paths: list[str]) -> Callable[[Client, int], None]:
    def request(client: Client, count: int) -> None:
        status, _ = client.get(paths[count % len(paths)])
        if status != 200:
            raise BenchError(f"GET {paths[count % len(paths)]}: {status}")

    return request


def _deliver() -> Callable[[Client, int], None]:
    def request(client: Client, count: int) -> None:
        body = json.dumps(
            {
                "ref": "refs/heads/main",
                "after": uuid.uuid4().hex + uuid.uuid4().hex[:8],
                "deleted": False,
                # Each real push carries its own time; an identical body is refused as a replay.
                "repository": {"full_name": "octo/api", "clone_url": CLONE_URL, "pushed_at": time.time_ns()},
            }
        ).encode()
        headers = {
            "X-Hub-Signature-256": sign(SECRET, body),
            "X-GitHub-Delivery": str(uuid.uuid4()),
            "X-GitHub-Event": "push",
            "Content-Type": "application/json",
        }
        status, content = client.request("POST", "/api/v1/webhooks/github", body=body, headers=headers)
        if status != 202:
            raise BenchError(f"webhook delivery: {status} {content[:200]!r}")

    return request


def _signed_in(base: str) -> Client:
    session = requests.Session()
    page = session.get(base + "/sign-in", timeout=30).text
    token = re.search(r'name="csrf_token" value="([^"]+)"', page)
    if token is None:
        raise BenchError("the sign-in page has no CSRF token")
    answer = session.post(
        base + "/sign-in",
        data={"username": "bench", "password": PASSWORD, "csrf_token": token[1]},
        allow_redirects=False,
        timeout=30,
    )
    if answer.status_code != 302:
        raise BenchError(f"sign-in answered {answer.status_code}")
    cookies = session.cookies.get_dict()
    session.close()
    return Client(base, cookies=cookies)


def run(quick: bool = False) -> dict:
    jobs = 400 if quick else 10_000
    clients = 5 if quick else CLIENTS  # the quick run: each sign-in hashes a password
    seconds = 2.0 if quick else 20.0
    broker = f"{redis_server_url().rsplit('/', 1)[0]}/{REDIS_DATABASE}"
    with scratch_database("service") as database_url, scratch_dir("service") as home:
        env = {
            **os.environ,
            "LAGTRACE_DATABASE_URL": database_url,
            "LAGTRACE_BROKER_URL": broker,
            "LAGTRACE_WORK_DIR": str(home / "work"),
            "LAGTRACE_ARTIFACT_DIR": str(home / "artifacts"),
            "LAGTRACE_GITHUB_WEBHOOK_SECRET": SECRET,
            "LAGTRACE_SECRET_KEY": "bench-secret-key",
            "LAGTRACE_COOKIE_SECURE": "false",  # plain http on loopback
            # The deliveries' repository is on a host of its own (nothing is cloned here).
            "LAGTRACE_REPOSITORY_HOSTS": "git.example",
        }
        _cli(env, "migrate")
        engine = make_engine(Settings(database_url=database_url))
        started = time.perf_counter()
        with Session(engine) as session:
            counts = seed(session, jobs=jobs)
            session.commit()
        with engine.connect() as connection:
            connection.exec_driver_sql("ANALYZE")
            connection.commit()
            project = connection.exec_driver_sql("SELECT id FROM projects WHERE name = 'octo/api'").scalar()
            # Deep pages: half-way down the project's jobs (API) and everyone's (dashboard).
            newest, project_jobs = connection.execute(
                text("SELECT max(id), count(*) FROM jobs WHERE project_id = :p"), {"p": project}
            ).one()
            deep_in_project = connection.execute(
                text("SELECT id FROM jobs WHERE project_id = :p ORDER BY id DESC OFFSET :n LIMIT 1"),
                {"p": project, "n": project_jobs // 2},
            ).scalar()
            deep = connection.exec_driver_sql("SELECT max(id) - count(*) / 2 FROM jobs").scalar()
            # The ordinary jobs' newest (the newest of all is the 5,000-test suite's).
            ordinary = connection.execute(
                text("SELECT max(id) FROM jobs WHERE project_id = :p AND id < :n"), {"p": project, "n": newest}
            ).scalar()
        # The catalogue reads finished jobs once, as the service does when each job finishes.
        # and its report is stored then (the job pages read it).
        with Session(engine) as session:
            every = list(session.scalars(text("SELECT id FROM projects")))
            while catalogue_refresh(session, every):
                session.commit()
            for job_id in (newest, ordinary):
                store_report(session, session.get(Job, job_id), Thresholds())
            session.commit()
            # A test's history as people open it: one the project runs in many jobs (a
            # chart of 60 points per configuration), not a name it never ran.
            historic = session.execute(
                text(
                    "SELECT test_id FROM test_catalogue WHERE project_id = :p AND test_id LIKE 'tests/test_mod%' "
                    "GROUP BY test_id ORDER BY sum(jobs) DESC, test_id LIMIT 1"
                ),
                {"p": project},
            ).scalar_one()
        engine.dispose()
        seeded_s = time.perf_counter() - started
        token = _cli(env, "token", "create", "--project", "octo/api")
        _cli(env, "user", "create", "bench", "--admin", "--password-stdin", stdin=PASSWORD + "\n")
        # Deliveries start jobs only for a registered repository, signed with its secret.
        _cli(env, "repo", "register", "octo/api", "--url", CLONE_URL, "--secret-stdin", stdin=SECRET + "\n")
        port = _free_port()
        base = f"http://127.0.0.1:{port}"
        log = home / "serve.log"
        server = subprocess.Popen(
            [*LAGTRACE, "serve", "--port", str(port)],
            cwd=REPO,
            env=env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            _wait_ready(base, server, log)
            api_paths = [
                "/api/v1/jobs?limit=50",
                f"/api/v1/jobs/{ordinary}",
                f"/api/v1/jobs/{newest}",
                "/api/v1/findings?limit=50",
                f"/api/v1/jobs?limit=50&before_id={deep_in_project}",
            ]
            phases = {
                "inbox": ["/", f"/?project={project}&status=new", "/?kind=cpu_sensitivity"],
                "job list": ["/jobs", f"/jobs?project={project}&status=done", f"/jobs?before={deep}"],
                "job page": [f"/jobs/{newest}", f"/jobs/{ordinary}"],
                "catalogue": [
                    "/tests",
                    f"/tests?project={project}&q=test_mod1",
                    "/tests?page=1",
                    f"/tests/entry?project={project}&id={historic}",
                ],
            }
            api_clients = [Client(base, headers={"Authorization": f"Bearer {token}"}) for _ in range(clients)]
            page_clients = [_signed_in(base) for _ in range(clients)]
            # Warm the templates, the query plans and the database's buffers.
            _load(api_clients[:1], 1.0, _get(api_paths))
            for paths in phases.values():
                _load(page_clients[:1], 1.0, _get(paths))
            api = _load(api_clients, seconds, _get(api_paths))
            pages = {name: _load(page_clients, seconds, _get(paths)) for name, paths in phases.items()}
            hook_clients = [Client(base) for _ in range(clients)]
            hook_started = time.perf_counter()
            hooks = _load(hook_clients, seconds, _deliver())
            hook_s = time.perf_counter() - hook_started
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
            redis.Redis.from_url(broker).flushdb()
    note = f"{clients} clients, {seconds:g} s"
    return {
        "figures": [
            quantile_figure("API p50", api, 50, unit="ms", note=note),
            quantile_figure("API p95", api, 95, unit="ms", below=TARGET_MS, note=note),
            *(
                figure
                for name, latencies in pages.items()
                for figure in (
                    quantile_figure(f"{name} p50", latencies, 50, unit="ms", note=note),
                    quantile_figure(f"{name} p95", latencies, 95, unit="ms", below=TARGET_MS, note=note),
                )
            ),
            quantile_figure("webhook p95", hooks, 95, unit="ms", below=TARGET_MS, note=note),
            rate_figure("webhook throughput", len(hooks), hook_s, note="deliveries stored and queued per second"),
        ],
        "seeded": counts,
        "seed_s": seeded_s,
        "requests": {"api": len(api), **{name: len(v) for name, v in pages.items()}, "webhooks": len(hooks)},
    }


def _wait_ready(base: str, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise BenchError(f"lagtrace serve exited {server.returncode}: {log.read_text()[-2000:]}")
        try:
            if requests.get(base + "/readyz", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise BenchError(f"lagtrace serve did not become ready: {log.read_text()[-2000:]}")
