"""The service quickstart followed literally (no LAGTRACE_SECRET_KEY: `serve`
starts one process per CPU), then the dashboard in headless Chromium as its new user
meets it: sign in, the inbox, the job `submit` named, a finding with its flame graph
drawn, the evidence entry's own page, and the test's page.

The commands come from the service guide's quickstart (tests/e2e/test_quickstart.py
reads them), with a database, a Redis database and a port of the test's own; after
`submit` the script adds the dashboard guide's `user create` and keeps `serve` and the
worker running while the browser looks.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import time

import pytest
from playwright.sync_api import expect

from tests.conftest import REPO, require
from tests.e2e.test_dashboard_browser import browser, shots  # noqa: F401 (fixtures)
from tests.e2e.test_quickstart import (  # noqa: F401 (services: a fixture)
    DASHBOARD_PAGE,
    QUICKSTART_TIMEOUT_S,
    free_port,
    quickstart_commands,
    script,
    services,
)
from tests.web.conftest import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.latency]

USER = "alice"  # the Dashboard section's account, on the quickstart's project
FRESH_SIGN_INS = 4


def dashboard_user_command() -> str:
    """The dashboard guide's `user create` for the quickstart's project, its password on
    stdin (the guide's line prompts for it)."""
    section = DASHBOARD_PAGE.read_text().split("# Dashboard", 1)[1].split("\n## ", 1)[0]
    line = next(raw.strip() for raw in section.splitlines() if f"user create {USER} " in raw)
    command = re.sub(r"\s+#.*$", "", line)
    return f"printf '%s\\n' {shlex.quote(PASSWORD)} | {command} --password-stdin"


@contextlib.contextmanager
def quickstart_running(services, postgres_server_url, redis_url, tmp_path):  # noqa: F811
    """The quickstart run as root with its real HOME, left running once `submit` returned;
    yields (port, stdout, stderr) of the script so far."""
    database_url, broker_url = services
    port = free_port()
    body = script(quickstart_commands(), database_url, broker_url, port, postgres_server_url, redis_url, False)
    ready = tmp_path / "ready"
    body += f"{dashboard_user_command()}\ntouch {shlex.quote(str(ready))}\nwait\n"
    assert "LAGTRACE_SECRET_KEY" not in body
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": pwd.getpwuid(0).pw_dir, "LANG": "C.UTF-8"}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]  # a worktree's own code, not the venv's checkout
    out_path, err_path = tmp_path / "stdout", tmp_path / "stderr"
    with out_path.open("w") as out_file, err_path.open("w") as err_file:
        process = subprocess.Popen(
            ["/bin/bash", "-s"],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=out_file,
            stderr=err_file,
            text=True,
            start_new_session=True,
        )
        assert process.stdin is not None
        process.stdin.write(body)
        process.stdin.close()
        try:
            deadline = time.monotonic() + QUICKSTART_TIMEOUT_S
            while not ready.exists():
                assert process.poll() is None, f"{body}\n--- stderr\n{err_path.read_text()[-6000:]}"
                assert time.monotonic() < deadline, (
                    f"not done in {QUICKSTART_TIMEOUT_S} s: {err_path.read_text()[-6000:]}"
                )
                time.sleep(0.5)
            yield port, out_path.read_text(), err_path.read_text()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)


def sign_in(browser, base_url: str):  # noqa: F811
    """A fresh browser session's sign-in; returns its page on the inbox."""
    context = browser.new_context(viewport={"width": 1360, "height": 900}, base_url=base_url)
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto("/")
    assert "/sign-in" in page.url, page.url
    page.fill("input[name=username]", USER)
    page.fill("input[name=password]", PASSWORD)
    page.click("form button[type=submit]")
    page.wait_for_url(re.compile(r"/$"))
    assert page.locator("h1").inner_text() == "Findings", page.content()[:2000]
    return page


def test_the_readme_quickstart_then_the_dashboard_in_a_browser(
    browser,  # noqa: F811
    shots,  # noqa: F811
    services,  # noqa: F811
    postgres_server_url,
    redis_url,
    tmp_path,
):
    require(os.geteuid() == 0, "the quickstart's provisioning is root's")
    require(shutil.which("docker") is not None, "no docker CLI")
    with quickstart_running(services, postgres_server_url, redis_url, tmp_path) as (port, out, err):
        # The hand-off's finding, as the guide promises; `submit` named the job's page.
        assert re.search(r"^  (HIGH|MEDIUM|LOW)\s+cpu_sensitivity: ", out, re.M), out
        # No key per process (whose sign-ins the other process refused): one, kept in the database.
        assert "sign-ins last until this process exits" not in err
        assert "sign-ins are signed with the key kept in the database" in err
        # A worker started a moment before may not have said it is alive yet: the line then
        # ends with the server's warning in parentheses.
        queued = re.search(rf"^lagtrace: job (\d+) queued: (http://127\.0\.0\.1:{port}/jobs/\d+)( \(.*\))?$", err, re.M)
        assert queued, err[-3000:]
        job_id = queued.group(1)
        # localhost, not 127.0.0.1: the Secure cookie in a browser's secure context.
        base = f"http://localhost:{port}"
        # Fresh sessions through `serve`'s processes (one per CPU), each signed in.
        pages = [sign_in(browser, base) for _ in range(FRESH_SIGN_INS)]
        for extra in pages[1:]:
            extra.context.close()
        page = pages[0]
        errors: list[str] = []
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        try:
            inbox = page.locator("table tbody")
            assert "cpu_sensitivity" in inbox.inner_text(), page.content()[-3000:]
            page.screenshot(path=shots / "40-quickstart-inbox.png", full_page=True)

            page.goto(f"/jobs/{job_id}")
            page.wait_for_selector("table.matrix")
            assert "cpuset=0-1" in page.locator("table.matrix").inner_text()
            finding_links = [link.get_attribute("href") for link in page.locator("article.finding h3 a").all()]
            assert finding_links, page.content()[-3000:]
            page.screenshot(path=shots / "41-quickstart-job.png", full_page=True)

            # A finding whose evidence holds the py-spy profile: its flame graph is drawn.
            flame = None
            for href in finding_links:
                page.goto(href)
                if page.locator(".flame[data-profile]").count():
                    flame = page.locator(".flame[data-profile]").first
                    break
            assert flame is not None, f"no finding of job {job_id} shows a py-spy profile: {finding_links}"
            # Evidence the finding does not cite is folded: opened as a reader would.
            while (closed := flame.locator("xpath=ancestor::details[not(@open)]")).count():
                closed.first.locator("xpath=./summary").click()
            # This box's own drawing: another box on the page, not folded, may be ready first.
            expect(flame).to_have_attribute("data-ready", "true", timeout=30_000)
            assert flame.locator(".flame-chart svg g.frame").count() >= 3
            assert "needs its script" not in flame.locator(".flame-details").inner_text()
            page.screenshot(path=shots / "42-quickstart-finding.png", full_page=True)

            # The evidence entry's own page draws it too.
            page.goto(flame.get_attribute("data-profile").removesuffix("/flame.json"))
            page.locator(".flame[data-ready=true]").first.wait_for(timeout=30_000)
            assert page.locator(".flame-chart svg g.frame").count() >= 3

            # The test's page: every run as a dot per configuration.
            page.goto(f"/jobs/{job_id}/test")
            page.wait_for_selector("svg.plot")
            assert "cpuset=0-1" in page.content() and "cpuset=0" in page.content()
            page.screenshot(path=shots / "43-quickstart-test.png", full_page=True)
            assert not errors, errors
        finally:
            page.context.close()
