"""The broker and the database fail under a running service: Redis restarts with messages
queued (all lost: no persistence), PostgreSQL stops for half a minute mid-screen, and a
failover leaves the service's address on a read-only server for 20 s."""

from __future__ import annotations

import json
import time

from sqlalchemy import create_engine, text

from tests.chaos.conftest import BOUND_S, QUICK_YML, SLOW_YML, START_UP_S, report


def test_redis_restarted_with_messages_queued(stack, private_redis, repository_with):
    stack.worker().terminate()  # nobody consumes: the jobs' first steps wait in Redis
    stack.worker().wait(timeout=60)
    repository = repository_with(QUICK_YML)
    jobs = [stack.push(repository) for _ in range(3)]
    assert private_redis.process is not None
    private_redis.stop()
    fault = time.monotonic()
    private_redis.start()  # empty: the queued messages are gone
    stack.spawn_worker("worker-after-redis")
    finals = []
    for job_id in jobs:
        status, _ = stack.wait_final(job_id, BOUND_S + START_UP_S + 120)
        assert status == "done", stack.logs()
        finals.append(time.monotonic() - fault)
    resent = max(finals[0], 0.0)
    report(f"Redis restarted with {len(jobs)} jobs queued", resent, finals[-1])
    # The first job's prepare was resent by the reconciler within the bound (plus its own work).
    assert finals[0] <= BOUND_S + START_UP_S + 30
    for job_id in jobs:
        stack.assert_effects_once(job_id, repeat=1)


def test_postgresql_stopped_for_30_s_mid_screen(stack, private_postgres, repository_with):
    job_id = stack.push(repository_with(SLOW_YML))
    stack.wait_for_run(job_id)
    private_postgres.stop()
    fault = time.monotonic()
    try:
        # The API says what is wrong, and that nothing was stored.
        body = json.dumps({"repository": {"url": "https://example.com/r.git"}, "command": ["true"]}).encode()
        status, answer = stack.request("POST", "/api/v1/jobs", body, {"Content-Type": "application/json"})
        assert status == 503, answer
        assert "database is unavailable" in answer["error"]
        status, answer = stack.request("GET", f"/api/v1/jobs/{job_id}")
        assert status == 503, answer
        time.sleep(max(0.0, 30 - (time.monotonic() - fault)))
    finally:
        private_postgres.start()
    back = time.monotonic()
    status, final = stack.wait_final(job_id, BOUND_S + START_UP_S + 120)
    report("PostgreSQL stopped 30 s", back - fault, time.monotonic() - fault)
    assert status == "done", f"{stack.ledger(job_id)}\n{stack.logs()}"
    # Paused, not failed: the outage cost no attempt of the job's.
    attempts = {name: tries for name, _, tries, _ in stack.ledger(job_id)}
    assert attempts["screen"] <= 2, attempts
    worker_logs = "".join(log.read_text() for log in stack.base.glob("worker*.log"))
    assert "paused: the database is unreachable" in worker_logs
    assert final <= BOUND_S + START_UP_S + 60
    stack.assert_effects_once(job_id, repeat=4)


FAILOVER_S = 20.0


def test_a_failover_to_a_read_only_server_mid_screen_is_waited_out(stack, private_postgres, repository_with):
    """The connections are cut and, until the new primary takes the address, the server
    there only reads: writes get SQLSTATE 25006 (services/db.py). The step pauses as for
    an outage and the job ends done, not failed."""
    job_id = stack.push(repository_with(SLOW_YML))
    stack.wait_for_run(job_id)
    name = stack.database_url.rsplit("/", 1)[1]
    admin = create_engine(private_postgres.url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on'))
            connection.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :name"), {"name": name}
            )
        fault = time.monotonic()
        time.sleep(FAILOVER_S)
        with admin.connect() as connection:
            connection.execute(text(f'ALTER DATABASE "{name}" RESET default_transaction_read_only'))
    finally:
        admin.dispose()
    back = time.monotonic()
    status, _ = stack.wait_final(job_id, BOUND_S + START_UP_S + 120)
    report(f"a failover: the database read-only {FAILOVER_S:g} s", back - fault, time.monotonic() - fault)
    assert status == "done", f"{stack.ledger(job_id)}\n{stack.logs()}"
    worker_logs = "".join(log.read_text() for log in stack.base.glob("worker*.log"))
    assert "read-only transaction" in worker_logs or "terminating connection" in worker_logs, worker_logs[-3000:]
    assert "paused: the database is unreachable" in worker_logs
    stack.assert_effects_once(job_id, repeat=4)
