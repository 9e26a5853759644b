"""Two edges an operator meets: migrations queued behind a held lock, and a signed
webhook body larger than anything GitHub sends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

from sqlalchemy import create_engine, text

from services.models import Job, WebhookDelivery
from tests.conftest import REPO
from tests.service_support import delivery_headers

# migrations/env.py's key: holding it is what a migration in progress does.
ADVISORY_LOCK_KEY = 0x6C616774


def migrate(database_url: str, wait_s: float) -> subprocess.Popen:
    env = {**os.environ, "LAGTRACE_DATABASE_URL": database_url, "LAGTRACE_MIGRATE_LOCK_WAIT_S": str(wait_s)}
    return subprocess.Popen(
        [sys.executable, "-m", "cli.main", "migrate"], cwd=REPO, env=env, stderr=subprocess.PIPE, text=True
    )


def test_concurrent_migrations_wait_for_a_held_lock_with_a_clear_message(private_postgres):
    name = f"lagtrace_chaos_migrate_{uuid.uuid4().hex[:8]}"
    admin = create_engine(private_postgres.url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = f"{private_postgres.url.rsplit('/', 1)[0]}/{name}"
    holder = create_engine(url).connect()
    try:
        holder.execute(text("SELECT pg_advisory_lock(:key)"), {"key": ADVISORY_LOCK_KEY})
        held_s = 12.0  # over the 10 s lock_timeout that used to end both with a traceback
        started = time.monotonic()
        patient = [migrate(url, 60) for _ in range(2)]
        impatient = migrate(url, 2)
        _, complaint = impatient.communicate(timeout=60)
        # Released once the impatient one gave up, and not before held_s: on a busy machine its
        # start-up alone took longer than a timer of held_s, and it found the lock free.
        time.sleep(max(0.0, held_s - (time.monotonic() - started)))
        holder.execute(text("SELECT pg_advisory_unlock_all()"))
        assert impatient.returncode == 1
        assert "held the migration lock" in complaint and "LAGTRACE_MIGRATE_LOCK_WAIT_S" in complaint
        assert "Traceback" not in complaint, complaint
        for process in patient:
            _, said = process.communicate(timeout=120)
            assert process.returncode == 0, said
            assert "waiting up to 60 s" in said and "Traceback" not in said
        waited = time.monotonic() - started
        print(f"\ntwo migrations behind a {held_s:g} s lock: both at head after {waited:.1f} s; the 2 s one gave up")
        assert waited >= held_s - 1
    finally:
        holder.close()
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def test_a_signed_webhook_body_over_25_mb_is_refused(stack):
    payload = {"zen": "x" * (26 * 1000 * 1000)}
    body = json.dumps(payload).encode()
    status, answer = stack.request("POST", "/api/v1/webhooks/github", body, delivery_headers(body, "chaos-big", "ping"))
    assert status == 413, answer
    assert stack.count(WebhookDelivery) == 0 and stack.count(Job) == 0
    small = json.dumps({"zen": "x" * (1000 * 1000)}).encode()
    status, answer = stack.request(
        "POST", "/api/v1/webhooks/github", small, delivery_headers(small, "chaos-1mb", "ping")
    )
    assert status == 200 and answer["outcome"] == "pong", answer
