"""The Celery app's reliability settings, and the time limits that must nest."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
from pydantic import ValidationError

from services.settings import Settings
from tests.conftest import REPO
from worker import CeleryDispatcher, make_celery


def test_reliability_settings():
    settings = Settings(broker_url="redis://127.0.0.1:1/0")
    conf = make_celery(settings).conf
    assert conf.task_acks_late is True and conf.task_reject_on_worker_lost is True
    assert conf.worker_prefetch_multiplier == 1 and conf.worker_concurrency == 1
    visibility = conf.broker_transport_options["visibility_timeout"]
    assert conf.task_soft_time_limit < conf.task_time_limit < visibility
    # The lease measures liveness (heartbeats), not the task limit: a dead worker's step is
    # sent again within minutes, and one missed heartbeat does not lose a live step.
    assert settings.recovery_bound_s < 120
    assert settings.heartbeat_interval_s * 2 <= settings.lease_s
    assert conf.beat_schedule["reconcile"]["task"] == "lagtrace.reconcile"


def test_time_limits_that_do_not_nest_are_refused():
    with pytest.raises(ValidationError, match="must nest"):
        Settings(task_time_limit_s=4000, broker_visibility_timeout_s=3600)


@pytest.mark.parametrize(
    ("limits", "named"),
    [
        # docs/guides/reliability.md, every run ends: the default run timeout at 1800 s against a soft limit lowered to 1500 s.
        ({"task_soft_time_limit_s": 1500, "task_time_limit_s": 1700}, "LAGTRACE_RUN_TIMEOUT_S (1800 s)"),
        # The default may fit while the maximum a job may ask for does not.
        ({"task_soft_time_limit_s": 2000, "task_time_limit_s": 2200}, "LAGTRACE_RUN_TIMEOUT_MAX_S (3000 s)"),
    ],
)
def test_a_run_timeout_the_steps_soft_limit_would_cut_off_is_refused(limits, named):
    with pytest.raises(ValidationError, match=r"must be below LAGTRACE_TASK_SOFT_TIME_LIMIT_S") as refused:
        Settings(**limits)
    assert named in str(refused.value)


def test_a_worker_with_a_run_timeout_above_the_soft_limit_refuses_to_start():
    env = {
        **os.environ,
        "LAGTRACE_BROKER_URL": "redis://127.0.0.1:1/0",
        "LAGTRACE_TASK_SOFT_TIME_LIMIT_S": "1500",
        "LAGTRACE_TASK_TIME_LIMIT_S": "1700",
    }
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "worker"], env=env, capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 2
    assert "LAGTRACE_RUN_TIMEOUT_S (1800 s) must be below LAGTRACE_TASK_SOFT_TIME_LIMIT_S (1500 s)" in done.stderr


def test_a_heartbeat_slower_than_half_the_lease_is_refused():
    with pytest.raises(ValidationError, match="HEARTBEAT_INTERVAL_S"):
        Settings(step_lease_s=20, heartbeat_interval_s=15)


def test_a_worker_needs_a_broker():
    with pytest.raises(ValueError, match="LAGTRACE_BROKER_URL"):
        make_celery(Settings(broker_url=None))


def test_the_dispatcher_reports_an_unreachable_broker():
    problem = CeleryDispatcher(make_celery(Settings(broker_url="redis://127.0.0.1:1/0"))).problem()
    assert problem and "127.0.0.1:1" in problem


def test_the_dispatcher_reaches_the_test_redis(redis_url):
    assert CeleryDispatcher(make_celery(Settings(broker_url=redis_url))).problem() is None


# Hash seeds with which Celery's boot order, before the worker's steps required the pool,
# started the database heartbeat and the checkout sweeper ahead of it (4 of the first 8).
@pytest.mark.parametrize("seed", ["0", "2", "3", "7"])
def test_the_heartbeat_and_sweeper_threads_start_after_the_pool_forks(seed, tmp_path, migrated_sqlite, redis_url):
    """A thread running while the pool forks leaves the child a copy of every lock it
    held: a worker with --beat took steps and never ran them when its heartbeat thread was
    connecting to the database as the pool forked. The boot order follows set iteration,
    so it is tried under fixed hash seeds, in a real worker's own log."""
    database = tmp_path / "lagtrace.db"
    shutil.copy(migrated_sqlite, database)
    env = {
        **os.environ,
        "PYTHONHASHSEED": seed,
        "LAGTRACE_DATABASE_URL": f"sqlite:///{database}",
        "LAGTRACE_BROKER_URL": redis_url.rsplit("/", 1)[0] + "/14",
        "LAGTRACE_WORK_DIR": str(tmp_path / "work"),
    }
    log_path = tmp_path / "worker.log"
    with log_path.open("w") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "worker", "--beat", "--loglevel=DEBUG"],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while "celery@" not in (text := log_path.read_text()) or " ready." not in text:
            assert worker.poll() is None and time.monotonic() < deadline, text[-3000:]
            time.sleep(0.2)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)
    started = re.findall(r"\| Worker: Starting (\w+)", log_path.read_text())
    assert {"Pool", "Registration", "CheckoutSweeper"} <= set(started), started
    assert started.index("Pool") < started.index("Registration"), started
    assert started.index("Pool") < started.index("CheckoutSweeper"), started


@pytest.mark.skipif(os.geteuid() != 0, reason="the warning is Celery's for root only: run as root")
def test_a_worker_started_as_root_says_so_once(tmp_path, migrated_sqlite, redis_url):
    """The service quickstart runs `lagtrace worker` as root: Celery warned of superuser
    privileges in each of its three processes (the measurement worker and its light and
    check-run workers), on every start. lagtrace says once why root is supported."""
    from worker.app import AS_ROOT

    database = tmp_path / "lagtrace.db"
    shutil.copy(migrated_sqlite, database)
    env = {
        **os.environ,
        "LAGTRACE_DATABASE_URL": f"sqlite:///{database}",
        "LAGTRACE_BROKER_URL": redis_url.rsplit("/", 1)[0] + "/10",
        "LAGTRACE_WORK_DIR": str(tmp_path / "work"),
    }
    env.pop("C_FORCE_ROOT", None)
    log_path = tmp_path / "worker.log"
    with log_path.open("w") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "worker"],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 90
        # The measurement worker's and its two light workers' "celery@... ready." lines.
        while (text := log_path.read_text()).count(" ready.") < 3:
            assert worker.poll() is None and time.monotonic() < deadline, text[-3000:]
            time.sleep(0.2)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)
    text = log_path.read_text()
    assert text.count("superuser privileges") + text.count(AS_ROOT) == 1, text[-3000:]
    assert text.count(AS_ROOT) == 1


def test_an_app_that_would_unpickle_keeps_celerys_root_warning():
    # Celery refuses root where a message could be unpickled: lagtrace quiets nothing then.
    from worker.app import accepts_root

    app = make_celery(Settings(broker_url="redis://127.0.0.1:1/0"))
    assert list(app.conf.accept_content) == ["json"]
    app.conf.accept_content = ["json", "pickle"]
    assert accepts_root(app) is False
