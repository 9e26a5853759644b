"""A worker dies mid-screen (kill -9 of its tree, the OOM killer's kill of its pool child,
systemd's SIGTERM to its process group): the screen is re-leased within the recovery
bound, runs once more from its start, and the job ends with one set of runs, one check
run and no container left, the killed run's included. Meanwhile the job page and
`lagtrace submit` say that the worker was lost, and that none is running."""

from __future__ import annotations

import http.cookiejar
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

from services.jobs import workers
from tests.chaos.conftest import (
    BOUND_S,
    SLOW_YML,
    START_UP_S,
    chaos_stack,
    children,
    kill_group,
    record,
    report,
)
from tests.conftest import REPO

SCREEN_ATTEMPT = 1  # the screen's first attempt is the one killed


def test_kill_9_of_the_worker_tree_mid_screen_then_a_new_worker(stack, repository_with):
    job_id = stack.push(repository_with(SLOW_YML))
    stack.wait_for_run(job_id)
    fault = kill_group(stack.worker(), signal.SIGKILL)
    stack.spawn_worker("worker-after-kill")
    recovery = stack.wait_relaunched(job_id, "screen", SCREEN_ATTEMPT, BOUND_S + START_UP_S + 30, since=fault)
    status, _ = stack.wait_final(job_id, 180)
    report("kill -9 of the worker tree", recovery, time.monotonic() - fault)
    assert status == "done", stack.logs()
    assert recovery <= BOUND_S + START_UP_S
    stack.assert_effects_once(job_id, repeat=4)


def test_the_oom_killer_takes_only_the_pool_child(stack, repository_with):
    job_id = stack.push(repository_with(SLOW_YML))
    stack.wait_for_run(job_id)
    # The ledger names the process running the screen: the pool child (not the beat's).
    [holder] = [who for name, _, _, who in stack.ledger(job_id) if name == "screen"]
    pool_child = int(re.search(r"/(\d+)", holder).group(1))  # host/pid[ on node][, CPU model]
    assert pool_child in children(stack.worker().pid)
    os.kill(pool_child, signal.SIGKILL)
    fault = time.monotonic()
    recovery = stack.wait_relaunched(job_id, "screen", SCREEN_ATTEMPT, BOUND_S + START_UP_S + 30, since=fault)
    status, _ = stack.wait_final(job_id, 180)
    report("kill -9 of the pool child", recovery, time.monotonic() - fault)
    assert status == "done", stack.logs()
    assert recovery <= BOUND_S + START_UP_S
    stack.assert_effects_once(job_id, repeat=4)


def test_sigterm_to_the_workers_process_group(stack, repository_with):
    """SIGTERM reaches the pool process as well as the worker: billiard raises SystemExit
    there, and the worker's drain signal follows. Whichever the pool process handles first,
    the screen runs again on the next worker: given back at once, or re-leased once its
    lease runs out."""
    job_id = stack.push(repository_with(SLOW_YML))
    stack.wait_for_run(job_id)
    victim = stack.worker()
    fault = kill_group(victim, signal.SIGTERM)
    victim.wait(timeout=60)  # a warm shutdown ends once the pool child is gone
    after = stack.spawn_worker("worker-after-sigterm")
    recovery = stack.wait_relaunched(job_id, "screen", SCREEN_ATTEMPT, BOUND_S + START_UP_S + 60, since=fault, by=after)
    status, _ = stack.wait_final(job_id, 180)
    report("SIGTERM to the worker's process group", recovery, time.monotonic() - fault)
    assert status == "done", stack.logs()
    assert recovery <= BOUND_S + START_UP_S + 30  # the warm shutdown takes its time first
    stack.assert_effects_once(job_id, repeat=4)


class SignedIn:
    """A dashboard session over plain HTTP, as a person reading the job page."""

    def __init__(self, stack, username: str, password: str):
        self.url = stack.url
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        form = self.page("/sign-in")
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', form).group(1)
        body = urllib.parse.urlencode({"username": username, "password": password, "csrf_token": csrf}).encode()
        with self.opener.open(self.url + "/sign-in", data=body, timeout=30) as response:
            assert "/sign-in" not in response.url, "the sign-in was refused"

    def page(self, path: str) -> str:
        with self.opener.open(self.url + path, timeout=30) as response:
            return response.read().decode()


def _until(condition, timeout_s: float, what: str, stack) -> float:
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout_s, f"{what} not within {timeout_s:.0f} s\n{stack.logs()}"
        time.sleep(0.5)
    return time.monotonic()


def test_a_killed_worker_is_shown_lost_on_the_page_and_in_submit_then_a_new_worker_finishes_the_job(
    private_postgres, private_redis, engine_client, repository_with, tmp_path
):
    with chaos_stack(
        private_postgres,
        private_redis,
        tmp_path / "stack",
        LAGTRACE_COOKIE_SECURE="false",  # the page is read over plain HTTP here
        LAGTRACE_SECRET_KEY="chaos-secret-key",
    ) as stack:
        password = "a long enough password"
        made = stack.cli("user", "create", "ann", "--project", "octo/demo", "--password-stdin", input=password + "\n")
        assert made.returncode == 0, made.stderr
        reader = SignedIn(stack, "ann", password)
        directory = Path(repository_with(SLOW_YML)[0].removeprefix("file://"))
        progress_log = tmp_path / "submit.err"
        submit = subprocess.Popen(
            [
                *(sys.executable, "-m", "cli.main", "submit", "--url", stack.url, "--token", stack.token),
                *("--dir", str(directory), "--config", "cpuset=0", "--repeat", "4", "--executor", "docker"),
                *("--evidence", "none", "--poll", "0.5", "--", "python3", "-c", "import time; time.sleep(2)"),
            ],
            cwd=REPO,
            env=stack.env,
            stdout=subprocess.DEVNULL,
            stderr=progress_log.open("w"),
        )
        try:
            _until(lambda: re.search(r"job (\d+) queued", progress_log.read_text()), 60, "submit's job", stack)
            job_id = int(re.search(r"job (\d+) queued", progress_log.read_text()).group(1))
            stack.wait_for_run(job_id)
            assert workers.LOST not in reader.page(f"/jobs/{job_id}")  # a live worker: nothing to say
            fault = kill_group(stack.worker(), signal.SIGKILL)

            seen_page = _until(lambda: workers.LOST in reader.page(f"/jobs/{job_id}"), 60, "the page's warning", stack)
            seen_submit = _until(lambda: workers.LOST in progress_log.read_text(), 60, "submit's warning", stack)
            record("kill -9 of the worker tree", "job page says the worker was lost", seen_page - fault)
            record("kill -9 of the worker tree", "submit says the worker was lost", seen_submit - fault)
            assert seen_page - fault <= 30 and seen_submit - fault <= 30
            # Its row lapses too: nobody is left to take the step.
            _until(lambda: workers.NO_WORKER in progress_log.read_text(), 60, "submit's no-worker warning", stack)
            status, listed = stack.request("GET", "/api/v1/workers")
            assert status == 200 and listed["live"] == 0, listed

            stack.spawn_worker("worker-after-kill")
            assert submit.wait(timeout=BOUND_S + START_UP_S + 180) == 0, progress_log.read_text() + stack.logs()
        finally:
            if submit.poll() is None:
                submit.kill()
                submit.wait()
        record("kill -9 of the worker tree", "job final (submit returned)", time.monotonic() - fault)
        assert stack.status(job_id) == "done", stack.logs()
        assert "lagtrace: job" in progress_log.read_text()
        assert workers.LOST not in reader.page(f"/jobs/{job_id}")
        status, listed = stack.request("GET", "/api/v1/workers")
        assert listed["live"] == 1, listed
        stack.assert_effects_once(job_id, repeat=4, from_github=False)


def test_sigterm_to_the_worker_alone_gives_its_step_back(stack, repository_with):
    """A node drain or a rollout: Kubernetes sends SIGTERM to the pod's first process only,
    the Celery worker, whose pool process runs the screen. The screen stops where it is, its
    containers and checkout are removed, and it is given back uncounted; the worker exits
    within seconds (the chart's grace period is 90 s), and the next worker runs the screen."""
    job_id = stack.push(repository_with(SLOW_YML))
    stack.wait_for_run(job_id)
    victim = stack.worker()
    fault = time.monotonic()
    os.kill(victim.pid, signal.SIGTERM)
    victim.wait(timeout=90)
    gone = time.monotonic() - fault
    [(state, attempts)] = [(state, tries) for name, state, tries, _ in stack.ledger(job_id) if name == "screen"]
    assert (state.value, attempts) == ("pending", 0), f"{stack.ledger(job_id)}\n{stack.logs()}"
    assert not stack.running_containers(job_id)
    checkouts = stack.base / "work" / "jobs"
    assert checkouts.is_dir() and not list(checkouts.iterdir()), "a checkout was left behind"
    assert "given back: the worker is stopping" in (stack.base / "worker0.log").read_text()
    stack.spawn_worker("worker-after-drain")
    status, _ = stack.wait_final(job_id, 180)
    record("SIGTERM to the worker alone (a drain)", "step given back and worker gone", gone)
    record("SIGTERM to the worker alone (a drain)", "job final", time.monotonic() - fault)
    assert status == "done", stack.logs()
    assert gone <= 30
    stack.assert_effects_once(job_id, repeat=4)
