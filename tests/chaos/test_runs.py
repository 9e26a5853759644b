"""Runs that would hold a node for good: no timeout, a cancel mid-run, and containers
that belong to another installation on the same Docker engine."""

from __future__ import annotations

import contextlib
import socket
import time
import uuid

from docker.errors import NotFound
from sqlalchemy import select

from services.measure.executors.docker_guards import INSTALLATION_LABEL, OWNER_LABEL, reap_orphans
from services.models import Run, RunKind
from services.settings import Settings
from tests.chaos.conftest import CHAOS_SETTINGS, EFFECTIVE, QUICK_YML, chaos_stack, record

SLEEP_YML = "command: [sleep, '100000']\nconfigs: [cpuset=0]\nrepeat: 1\nexecutor: docker\nevidence: []\n"


def test_a_run_without_a_timeout_gets_the_default_and_none_may_exceed_the_maximum(
    private_postgres, private_redis, engine_client, tmp_path, repository_with
):
    default_s = 8.0
    with chaos_stack(
        private_postgres, private_redis, tmp_path / "stack", LAGTRACE_RUN_TIMEOUT_S=str(default_s)
    ) as stack:
        started = time.monotonic()
        job_id = stack.push(repository_with(SLEEP_YML))
        status, _ = stack.wait_final(job_id, default_s + 90)
        elapsed = time.monotonic() - started
        print(f"\nsleep 100000 with no timeout: job {status} after {elapsed:.1f} s (default timeout {default_s:g} s)")
        assert status == "done", stack.logs()
        [(timed_out, wall_s)] = stack.query(
            select(Run.timed_out, Run.wall_s).where(Run.config.has(job_id=job_id), Run.kind == RunKind.timing)
        )
        assert timed_out and default_s <= wall_s < default_s * 1.5
        stack.assert_effects_once(job_id, repeat=1)

        # Over the maximum whatever it is (120 s with the short settings, 3000 s shipped).
        too_long = stack.push(repository_with(SLEEP_YML + f"timeout_s: {EFFECTIVE.run_timeout_max_s * 2:g}\n"))
        status, _ = stack.wait_final(too_long, 60)
        _, job = stack.request("GET", f"/api/v1/jobs/{too_long}")
        assert status == "failed" and "maximum" in job["error"], job["error"]
        assert "LAGTRACE_RUN_TIMEOUT_MAX_S" in job["error"]


def test_cancel_stops_the_running_container_at_once_and_frees_the_node(stack, repository_with):
    job_id = stack.push(repository_with(SLEEP_YML))
    stack.wait_for_run(job_id)
    cancelled = time.monotonic()
    status, answer = stack.request("POST", f"/api/v1/jobs/{job_id}/cancel")
    assert status == 200 and answer["status"] == "cancelled", answer
    while stack.running_containers(job_id):
        assert time.monotonic() - cancelled < 30, "the cancelled job's container still runs"
        time.sleep(0.2)
    gone = time.monotonic() - cancelled
    record("cancel of a running job", "its container gone", gone)
    heartbeat = float(CHAOS_SETTINGS["LAGTRACE_HEARTBEAT_INTERVAL_S"])
    # The run timeout (60 s here) would have ended it much later.
    assert gone <= heartbeat + 10
    following = stack.push(repository_with(QUICK_YML))
    status, took = stack.wait_final(following, 90)
    print(f"\ncancel of a running job: its container gone {gone:.1f} s later; the next job done in {took:.1f} s")
    assert status == "done", stack.logs()
    assert stack.status(job_id) == "cancelled"
    stack.assert_effects_once(following, repeat=1)


def test_the_reaper_removes_only_its_own_installations_containers(engine_client):
    image = Settings().docker_image
    dead_owner = f"{socket.gethostname()}:999999999:0"  # no such process: both look orphaned
    mine, theirs = f"mine-{uuid.uuid4().hex[:8]}", f"theirs-{uuid.uuid4().hex[:8]}"
    made = {
        installation: engine_client.containers.create(
            image,
            ["sleep", "600"],
            labels={OWNER_LABEL: dead_owner, INSTALLATION_LABEL: installation},
            network_mode="none",
        )
        for installation in (mine, theirs)
    }
    try:
        removed = reap_orphans(engine_client, mine)
        assert made[mine].name in removed and made[theirs].name not in removed
        # ignore_removed: the list inspects each container, and another test's run removed
        # between the list and its inspection was a 404 here (docker-py's ContainerCollection.list).
        listed = engine_client.containers.list(all=True, filters={"label": OWNER_LABEL}, ignore_removed=True)
        left = {c.id for c in listed}
        assert made[theirs].id in left and made[mine].id not in left
    finally:
        for container in made.values():
            with contextlib.suppress(NotFound):
                container.remove(force=True)
