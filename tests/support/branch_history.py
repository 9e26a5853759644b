"""A branch's history as the engine stores it: each push's job created, its timing runs
stored (services/measure/runs.store_run) and finished through the engine's own diagnose
phase, which searches the branch for change points (slower_since)."""

from __future__ import annotations

import random

from sqlalchemy.orm import Session

from services.jobs import engine, lifecycle
from services.measure.configs import CpuConfig
from services.measure.executors.base import RunResult
from services.measure.pytest_command import TestCase
from services.measure.runs import store_run
from services.models import Job, JobSource, RunKind
from services.settings import Settings

STEPPED = "tests/test_api.py::test_search"
FLAT = [f"tests/test_api.py::test_flat_{i:02d}" for i in range(20)]
STEP_AT = 20  # the 21st push makes STEPPED 2x slower
CONFIG = "cpuset=0"


def commit(push: int) -> str:
    return f"{push:04x}" * 10


def _result(wall: float) -> RunResult:
    return RunResult(
        wall_s=wall,
        user_s=wall * 0.9,
        sys_s=0.01,
        max_rss_kb=30000,
        voluntary_ctx_switches=100,
        involuntary_ctx_switches=5,
        exit_code=0,
        timed_out=False,
        nr_periods=None,
        nr_throttled=None,
        throttled_s=None,
        output_tail=None,
    )


def push(
    session: Session,
    settings: Settings,
    rng: random.Random,
    push: int,
    *,
    github: bool = False,
    bisect_regressions: bool | None = None,
) -> Job:
    """One push of main: a job measuring every test 5 times, finished by the engine
    (``bisect_regressions``: .lagtrace.yml's, as its prepare step stores it)."""
    job = lifecycle.create_job(
        session,
        project="shop",
        command=["python3", "-m", "pytest", "tests"],
        configs=[CpuConfig(CONFIG, cpuset=(0,))],
        executor="docker",
        workdir=None,
        repeat=5,
        timeout_s=None,
        source="api",
    )
    session.add(
        JobSource(
            job_id=job.id,
            kind="git",
            repository_url="https://example.invalid/shop.git",
            ref="refs/heads/main",
            commit_sha=commit(push),
            github_repository="acme/shop" if github else None,
            github_head_sha=commit(push) if github else None,
            bisect_regressions=bisect_regressions,
        )
    )
    lifecycle.mark_running(job)
    # Ordinary noise: each push's job runs on a machine a few per cent faster or slower,
    # and each run varies by 5 %.
    machine = 1 + rng.gauss(0, 0.03)
    for repetition in range(1, 6):
        cases = [
            TestCase(STEPPED, 0.2 * (2.0 if push >= STEP_AT else 1.0) * machine * (1 + rng.gauss(0, 0.05)), "passed")
        ]
        cases += [
            TestCase(test, (0.05 + 0.01 * k) * machine * (1 + rng.gauss(0, 0.05)), "passed")
            for k, test in enumerate(FLAT)
        ]
        store_run(session, job.configs[0], RunKind.timing, repetition, _result(sum(c.duration_s for c in cases)), cases)
    engine.diagnose_phase(session, settings, job)
    session.flush()
    return job
