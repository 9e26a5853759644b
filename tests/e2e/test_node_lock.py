"""One measurement per node across workers that share nothing but the node: two real
`lagtrace worker` processes with work directories of their own (two pods' emptyDirs)
and one LAGTRACE_NODE_LOCK_PATH (the chart's hostPath) take turns."""

from __future__ import annotations

import json
import time

from sqlalchemy import create_engine, select

from services.models import JobConfig, Run
from tests.e2e.test_service import COUNTED_RUNS, running_stack
from tests.service_support import make_repository

# Each run sleeps long enough that two screens started together would overlap.
SLEEP = ["python3", "-c", "import time; time.sleep(0.4)"]


def _submit(stack, url: str) -> int:
    body = {
        "repository": {"url": url},
        "command": SLEEP,
        "configs": ["cpuset=0"],
        "repeat": 3,
        "evidence": [],
        "executor": "local",
    }
    status, job = stack.request("POST", "/api/v1/jobs", json.dumps(body).encode(), {"Content-Type": "application/json"})
    assert status == 201, job
    return job["id"]


def _run_spans(database_url: str, job_id: int) -> list[tuple[float, float]]:
    """(start, end) of each stored run: a run is stored the moment it ends, inside the lock."""
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                select(Run.started_at, Run.wall_s).join(JobConfig).where(JobConfig.job_id == job_id)
            ).all()
    finally:
        engine.dispose()
    return [(stored.timestamp() - wall, stored.timestamp()) for stored, wall in rows]


def test_two_workers_with_their_own_work_dirs_share_the_node_lock(postgres_server_url, redis_url, tmp_path):
    url, _ = make_repository(tmp_path / "repo" / "demo", None)
    locks = tmp_path / "node-lock"  # the hostPath: neither worker's work directory
    options = {"LAGTRACE_ALLOWED_EXECUTORS": "docker,local", **COUNTED_RUNS}
    with running_stack(postgres_server_url, redis_url, tmp_path / "stack", workers=0, **options) as stack:
        logs = [
            stack.spawn(
                f"worker{i}",
                "worker",
                "--loglevel=INFO",
                env={"LAGTRACE_WORK_DIR": str(tmp_path / f"pod{i}"), "LAGTRACE_NODE_LOCK_PATH": str(locks)},
            )
            for i in range(2)
        ]
        deadline = time.monotonic() + 60
        while not all("ready." in log.read_text() for log in logs):
            assert time.monotonic() < deadline, stack.logs()
            time.sleep(0.2)
        ids = [_submit(stack, url) for _ in range(2)]
        jobs = [stack.wait(job_id) for job_id in ids]
        spans = [_run_spans(stack.database_url, job_id) for job_id in ids]
        said = "".join(log.read_text() for log in logs)
    for job in jobs:
        assert job["status"] == "done", job["error"]
    # Both workers screened, one job each, at the same time: one waited for the other.
    screens = {job["progress"]["configs"][0]["worker"] for job in jobs}
    assert len(screens) == 2, screens
    first, second = sorted(spans, key=min)
    assert len(first) == len(second) == 1 + 3  # the warm-up, then three timing runs
    assert max(end for _, end in first) <= min(start for start, _ in second), (first, second)
    assert "waiting for another measurement on this node to finish" in said
    # Each report names the node and the lock its screen held (its name, not the worker's path).
    for job in jobs:
        [screen] = [place for place in job["report"]["measured_on"] if place["phase"] == "screen"]
        assert screen["locks"] == ["node"] and screen["node"]
