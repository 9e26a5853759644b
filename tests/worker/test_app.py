"""The Celery app's reliability settings, and the time limits that must nest."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.settings import Settings
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
