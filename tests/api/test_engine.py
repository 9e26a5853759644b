"""One engine: a job submitted through the API and the same command through `lagtrace run`
screen the same interleaved sequence of configurations, on one node, under its lock."""

from __future__ import annotations

import fcntl
import os
import random
import time
from pathlib import Path

from sqlalchemy import select

from services.measure.screen import round_order
from services.models import Job, JobConfig, Run, RunKind
from tests.conftest import run_cli
from tests.service_support import make_repository

CONFIGS = ["cpuset=0", "cpuset=0-1", "cpuset=1"]
# At the minimum number of repetitions no configuration stops early: every round is whole.
REPEAT = 3
COMMAND = ["python3", "steady.py"]


def run_order(api, job_id: int) -> list[tuple[str, int]]:
    """The job's timing runs as they were stored: (configuration, repetition)."""
    with api.session_factory() as session:
        rows = session.execute(
            select(JobConfig.label, Run.repetition)
            .join(Run, Run.config_id == JobConfig.id)
            .where(JobConfig.job_id == job_id, Run.kind == RunKind.timing)
            .order_by(Run.id)
        ).all()
    return [tuple(row) for row in rows]


def node_lock_is_held(work_dir: Path) -> bool:
    # The node's lock is its lock directory itself (services/measure/nodelock.py).
    handle = os.open(work_dir / "locks", os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(handle)
    return False


def test_the_service_and_lagtrace_run_screen_the_same_interleaved_sequence(api, tmp_path, database_url):
    # Compared with `lagtrace run` on the host: this deployment trusts its submitters with local.
    api.settings.allowed_executors = ["docker", "local"]
    url, _ = make_repository(tmp_path / "repo", None)
    body = {"repository": {"url": url}, "command": COMMAND, "configs": CONFIGS, "repeat": REPEAT}
    response = api.post("/api/v1/jobs", json={**body, "evidence": [], "executor": "local"})
    assert response.status_code == 201, response.get_json()
    job_id = response.get_json()["id"]

    # While the screen is between two runs with more to come, the node's lock stays held.
    planned = len(CONFIGS) * REPEAT
    probes: list[bool] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        detail = api.get(f"/api/v1/jobs/{job_id}").get_json()
        if detail["report"] is not None:
            break
        progress = detail["progress"]
        if progress["phase"] == "screening" and 1 <= progress["runs_done"] <= planned - 2:
            probes.append(node_lock_is_held(api.settings.work_dir))
        time.sleep(0.05)
    service = api.wait(job_id)
    assert service["status"] == "done", service["error"]
    assert probes and all(probes), f"the node lock was free during the screen: {probes}"
    # One screen step ran every configuration: one worker for all of them.
    workers = {config["worker"] for config in service["progress"]["configs"]}
    assert len(workers) == 1 and None not in workers

    # The same command, as a user runs it here, into the same database and on the same node lock.
    out = tmp_path / "report.json"
    options = [option for config in CONFIGS for option in ("--config", config)]
    options += ["--repeat", str(REPEAT), "--evidence", "none", "--json", str(out)]
    local = run_cli(
        ["run", "--executor", "local", *options, "--", *COMMAND],
        database_url,
        cwd=tmp_path / "repo",
        env={"LAGTRACE_WORK_DIR": str(api.settings.work_dir)},
    )
    assert local.returncode == 0, local.stderr
    cli_job_id = local.report(out)["job"]["id"]
    with api.session_factory() as session:
        assert session.get(Job, cli_job_id).source == "cli"

    # Interleaved: every configuration once per round, in the order the job's recorded
    # seed shuffles that round into (after one warm-up round), for both entry points.
    for screened in (job_id, cli_job_id):
        with api.session_factory() as session:
            seed = session.get(Job, screened).screen_seed
        assert seed is not None
        rounds = random.Random(seed)
        round_order(rounds, CONFIGS)  # the warm-up round
        expected = [(label, rep) for rep in range(1, REPEAT + 1) for label in round_order(rounds, CONFIGS)]
        assert run_order(api, screened) == expected
    assert [c["label"] for c in local.report(out)["configs"]] == [c["label"] for c in service["report"]["configs"]]
