"""`lagtrace serve --processes N` (LAGTRACE_WEB_PROCESSES): N serving processes on one
socket, a dead one replaced, all of them stopped by one SIGTERM to the parent."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import redis
import requests

from tests.cli.test_submit import free_port
from tests.conftest import REPO, run_cli

BROKER = "redis://127.0.0.1:1/0"  # never reached: serving pages queues nothing


def _children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
    return found


def _wait(condition, what: str, log: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"{what}: {log.read_text()[-3000:]}"
        time.sleep(0.1)


def test_serve_runs_the_processes_asked_for_and_replaces_a_dead_one(sqlite_url, tmp_path):
    assert run_cli(["migrate"], sqlite_url).returncode == 0
    port = free_port()
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "serve", "--port", str(port)],
            cwd=REPO,
            env={
                **os.environ,
                "LAGTRACE_DATABASE_URL": sqlite_url,
                "LAGTRACE_BROKER_URL": BROKER,
                "LAGTRACE_WEB_PROCESSES": "2",
            },
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait(lambda: len(_children(server.pid)) == 2, "two serving processes", log_path)
            first = _children(server.pid)

            def answers() -> bool:
                try:
                    return requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
                except requests.RequestException:
                    return False

            _wait(answers, "an answer on the shared port", log_path)
            # A serving process that dies is replaced; the port keeps answering.
            dead = min(first)
            os.kill(dead, signal.SIGKILL)
            _wait(
                lambda: len(_children(server.pid)) == 2 and dead not in _children(server.pid),
                "a replacement",
                log_path,
            )
            assert all(answers() for _ in range(10))
            survivors = _children(server.pid)
        finally:
            server.terminate()
            server.wait(timeout=30)
    assert server.returncode == 0, log_path.read_text()[-3000:]
    # One SIGTERM to the parent (what Kubernetes sends) stopped every serving process.
    for pid in survivors:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    assert "with 2 processes" in log_path.read_text()


def _stopped(pid: int):
    """SIGSTOP ``pid`` for the block: the other serving process accepts every connection."""

    class Stopped:
        def __enter__(self):
            os.kill(pid, signal.SIGSTOP)

        def __exit__(self, *_):
            os.kill(pid, signal.SIGCONT)

    return Stopped()


def _sign_in(base: str, username: str, password: str) -> int:
    with requests.Session() as browser:  # a new connection: whichever process accepts it
        page = browser.get(f"{base}/sign-in", timeout=10).text
        token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
        data = {"username": username, "password": password, "csrf_token": token}
        return browser.post(f"{base}/sign-in", data=data, allow_redirects=False, timeout=10).status_code


def test_rate_limits_hold_across_two_serving_processes(sqlite_url, tmp_path, redis_url):
    broker = redis_url.rsplit("/", 1)[0] + "/11"  # a database of its own (tests/worker: 12, 14)
    store = redis.Redis.from_url(broker)
    store.flushdb()
    assert run_cli(["migrate"], sqlite_url).returncode == 0
    token = run_cli(["token", "create", "--project", "octo/demo"], sqlite_url).stdout.strip().splitlines()[-1]
    made = subprocess.run(
        [sys.executable, "-m", "cli.main", "user", "create", "ann", "--project", "octo/demo", "--password-stdin"],
        cwd=REPO,
        env={**os.environ, "LAGTRACE_DATABASE_URL": sqlite_url},
        input="correct horse battery\n",
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "serve", "--port", str(port)],
            cwd=REPO,
            env={
                **os.environ,
                "LAGTRACE_DATABASE_URL": sqlite_url,
                "LAGTRACE_BROKER_URL": broker,  # the limits are kept in the broker's Redis
                "LAGTRACE_WEB_PROCESSES": "2",
                "LAGTRACE_SUBMISSIONS_PER_MINUTE": "3",
                "LAGTRACE_SIGN_IN_FAILURES_PER_MINUTE": "2",
                # One signing key for both processes (a form from one is posted to the other),
                # and plain http on 127.0.0.1.
                "LAGTRACE_SECRET_KEY": "a-key-both-processes-share",
                "LAGTRACE_COOKIE_SECURE": "false",
            },
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait(lambda: len(_children(server.pid)) == 2, "two serving processes", log_path)
            first, second = sorted(_children(server.pid))
            job = {"repository": {"url": "https://github.com/octo/demo.git"}, "command": ["python3", "-c", "pass"]}

            def submit() -> int:
                headers = {"Authorization": f"Bearer {token}", "Connection": "close"}
                return requests.post(f"{base}/api/v1/jobs", json=job, headers=headers, timeout=10).status_code

            with _stopped(first):  # all of this is served by the second process
                assert [submit() for _ in range(3)] == [201, 201, 201]
                assert [_sign_in(base, "ann", f"guess-{i}") for i in range(2)] == [401, 401]
            with _stopped(second):  # and this by the first, which has seen none of it
                assert submit() == 429
                assert _sign_in(base, "ann", "correct horse battery") == 429
        finally:
            server.terminate()
            server.wait(timeout=30)
            store.flushdb()
            store.close()
    assert server.returncode == 0, log_path.read_text()[-3000:]


CSRF_FIELD = re.compile(r'name="csrf_token" value="([^"]+)"')
SESSION_COOKIE = "lagtrace_session"


def _fresh_sign_in(base: str, password: str) -> str:
    """One browser's first visit: the sign-in form, the sign-in, the inbox; each request on
    a connection of its own (so any serving process may answer it). The cookie is Secure
    (browsers send it to http://127.0.0.1, requests' jar does not): carried by hand.
    Returns the inbox page's heading, or what came back instead."""
    cookies: dict[str, str] = {}

    def remember(response: requests.Response) -> None:
        if SESSION_COOKIE in response.cookies:
            cookies[SESSION_COOKIE] = response.cookies[SESSION_COOKIE]

    close = {"Connection": "close"}
    form = requests.get(f"{base}/sign-in", headers=close, timeout=10)
    remember(form)
    token = CSRF_FIELD.search(form.text)
    assert token, form.text[:500]
    signed_in = requests.post(
        f"{base}/sign-in",
        data={"username": "ann", "password": password, "csrf_token": token.group(1)},
        cookies=cookies,
        headers=close,
        allow_redirects=False,
        timeout=30,
    )
    remember(signed_in)
    if signed_in.status_code != 302:
        return f"sign-in answered {signed_in.status_code}"
    inbox = requests.get(f"{base}/", cookies=cookies, headers=close, allow_redirects=False, timeout=10)
    heading = re.search(r"<h1>([^<]*)</h1>", inbox.text)
    return heading.group(1) if inbox.status_code == 200 and heading else f"inbox answered {inbox.status_code}"


def test_sign_in_works_through_every_process_without_a_secret_key(sqlite_url, tmp_path):
    """The quickstart's `lagtrace serve` sets no LAGTRACE_SECRET_KEY: with a key of each
    process's own, a sign-in cookie made by one process was refused by the other (5 of 8
    fresh sign-ins came back to the form). One key, kept in the database, serves both."""
    from tests.web.conftest import PASSWORD

    assert run_cli(["migrate"], sqlite_url).returncode == 0
    # Sign-in failures are counted in the broker's Redis when there is one, and this broker
    # is never reached: each process counts its own (memory://), as without a broker.
    env = {
        **os.environ,
        "LAGTRACE_DATABASE_URL": sqlite_url,
        "LAGTRACE_BROKER_URL": BROKER,
        "LAGTRACE_RATE_LIMIT_STORAGE_URL": "memory://",
    }
    env.pop("LAGTRACE_SECRET_KEY", None)
    made = subprocess.run(
        [sys.executable, "-m", "cli.main", "user", "create", "ann", "--project", "demo", "--password-stdin"],
        cwd=REPO,
        env=env,
        input=PASSWORD + "\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    port = free_port()
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "serve", "--port", str(port), "--processes", "2"],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait(lambda: len(_children(server.pid)) == 2, "two serving processes", log_path)
            base = f"http://127.0.0.1:{port}"

            def answers() -> bool:
                try:
                    return requests.get(f"{base}/healthz", timeout=2).status_code == 200
                except requests.RequestException:
                    return False

            _wait(answers, "an answer on the shared port", log_path)
            outcomes = [_fresh_sign_in(base, PASSWORD) for _ in range(8)]
        finally:
            server.terminate()
            server.wait(timeout=30)
    assert outcomes == ["Findings"] * 8, (outcomes, log_path.read_text()[-3000:])
    # A restart keeps the key (and so every sign-in): it is the database's, not the process's.
    assert "LAGTRACE_SECRET_KEY is not set: sign-ins are signed with the key kept in the database" in (
        log_path.read_text()
    )
