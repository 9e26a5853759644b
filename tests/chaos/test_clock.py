"""A worker whose host clock is 120 s behind: leases are written and compared on the
database's clock (services/models.py database_now), so its steps are neither taken from
it nor retried, and the job ends done.

The skew is real: libfaketime (LD_PRELOAD) sets the worker's wall clock back, the clock
Python's datetime reads. The beat and one light worker that runs the reconciler keep the
host's clock, as the rest of a cluster would. Before leases used the database's clock,
this worker wrote leases that had run out two minutes before, the reconciler took each
step back while it ran, and the job failed after LAGTRACE_TASK_MAX_ATTEMPTS."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import time

import pytest
from sqlalchemy import select

from services.jobs.dispatch import NOTIFY
from services.models import Job
from tests.chaos.conftest import BOUND_S, EFFECTIVE, START_UP_S, chaos_stack, children, record
from tests.conftest import REPO, require

BEHIND_S = 120
# The screen outlasts a worker's start and two reconciles (4 runs in one configuration).
RUN_S = max(4.0, EFFECTIVE.reconcile_interval_s / 2)
LONG_SCREEN_YML = (
    f'command: [python3, -c, "import time; time.sleep({RUN_S:g})"]\n'
    "configs: [cpuset=0]\nrepeat: 4\nexecutor: docker\nevidence: []\n"
)

# libfaketime 0.9.10 fails clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME), which
# CPython's time.sleep calls, with EINVAL even when it leaves the monotonic clock alone
# (FAKETIME_DONT_FAKE_MONOTONIC). The worker then sleeps on a condition variable, which
# libfaketime passes through. Only sleeping changes: the wall clock stays skewed.
SLEEP_SHIM = """
import threading
import time

_never = threading.Event()


def _sleep(seconds):
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    _never.wait(seconds)


time.sleep = _sleep
"""


def _libfaketime() -> str:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    require(bool(found), "the clock test needs libfaketime (.ci/apt-packages.service.txt)")
    return found[0]


@pytest.fixture
def behind_env(tmp_path) -> dict[str, str]:
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SLEEP_SHIM)
    return {
        "LD_PRELOAD": _libfaketime(),
        "FAKETIME": f"-{BEHIND_S}s",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(shim), os.environ.get("PYTHONPATH")])),
    }


def test_a_worker_two_minutes_behind_loses_no_step(
    private_postgres, private_redis, engine_client, tmp_path, repository_with, behind_env
):
    """The worker that is behind holds the screen; a worker on the host's clock starts
    beside it, idle, with a reconciler of its own. Had the lease been written on the late
    clock, that reconciler would find it run out and the idle worker would take the screen."""
    with chaos_stack(private_postgres, private_redis, tmp_path / "stack", workers=0) as stack:
        stack.spawn("beat", "beat", "--loglevel=INFO")
        behind = stack.spawn_worker("worker-behind", beat=False, env=behind_env)
        started = time.monotonic()
        job_id = stack.push(repository_with(LONG_SCREEN_YML))
        stack.wait_for_run(job_id)
        stack.spawn_worker("worker-on-time", beat=False)
        status, _ = stack.wait_final(job_id, BOUND_S * 4 + START_UP_S + 180)
        record(f"a worker's clock {BEHIND_S} s behind", "job final", time.monotonic() - started)
        assert status == "done", f"{stack.ledger(job_id)}\n{stack.logs()}"
        # Every step ran once, the screen on the worker that is behind: none was taken from it.
        ledger = [row for row in stack.ledger(job_id) if not row[0].startswith(NOTIFY)]
        assert all(attempts == 1 for _, _, attempts, _ in ledger), ledger
        [screen_worker] = [worker for name, _, _, worker in ledger if name == "screen"]
        assert int(re.search(r"/(\d+)", screen_worker).group(1)) in children(behind.pid), (screen_worker, behind.pid)
        assert "is no longer held" not in stack.logs()
        [(created, began)] = stack.query(select(Job.created_at, Job.started_at).where(Job.id == job_id))
        # The API stamped the job on the host's clock, the worker started it on its own.
        assert (created - began).total_seconds() > BEHIND_S - 30, (created, began)
        stack.assert_effects_once(job_id, repeat=4)


AUTHENTICATE = """
import sys
from services.accounts.tokens import authenticate
from services.db import make_engine, make_session_factory
from services.errors import Unauthorized
from services.settings import Settings

engine = make_engine(Settings())
with make_session_factory(engine)() as session:
    try:
        print("valid", authenticate(session, "Bearer " + sys.argv[1]).project.name)
    except Unauthorized as exc:
        print("refused", exc)
"""


def test_a_tokens_expiry_is_read_on_the_databases_clock_whatever_the_hosts_say(postgres_url, tmp_path):
    """A token made for one day on a host two days behind, and checked on a host two days
    ahead: both clocks wrong by more than its life, and the token works, for its one day
    counts on the database's clock."""
    env = {**os.environ, "LAGTRACE_DATABASE_URL": postgres_url}
    subprocess.run([sys.executable, "-m", "cli.main", "migrate"], cwd=REPO, env=env, check=True, capture_output=True)
    skewed = {"LD_PRELOAD": _libfaketime(), "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    made = subprocess.run(
        [sys.executable, "-m", "cli.main", "token", "create", "--project", "octo/clock", "--days", "1"],
        cwd=REPO,
        env={**env, **skewed, "FAKETIME": "-2d"},
        capture_output=True,
        text=True,
        check=True,
    )
    token = made.stdout.strip().splitlines()[-1].strip()
    assert token.startswith("lt_"), made.stdout
    for offset in (None, "+2d"):
        clock = {**skewed, "FAKETIME": offset} if offset else {}
        checked = subprocess.run(
            [sys.executable, "-c", AUTHENTICATE, token], cwd=REPO, env={**env, **clock}, capture_output=True, text=True
        )
        assert checked.stdout.split() == ["valid", "octo/clock"], (offset, checked.stdout, checked.stderr)
