"""One way down: run a command once in one configuration and store the Run.

The screen (timing runs) and the drill (evidence runs) both come here, so a run is
wrapped (pytest writes JUnit XML), executed and stored the same way whoever asked.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from services.measure import pytest_command, pytest_workers
from services.measure.configs import cpu_config
from services.measure.executors.base import Executor, RunResult, RunWatcher
from services.measure.executors.base import RunRequest as ExecutorRequest
from services.measure.pytest_command import CollectionError, TestCase
from services.models import JobConfig, Run, RunKind, TestResult


@dataclass
class Measured:
    run: Run
    result: RunResult
    cases: list[TestCase]
    # Modules pytest could not collect (no test case of theirs ran).
    collection_errors: list[CollectionError] = field(default_factory=list)


@dataclass(frozen=True)
class Wrapping:
    """What an evidence probe adds around the command (its tool, environment, watcher)."""

    command: Callable[[list[str]], list[str]] = lambda command: command
    env: dict[str, str] = field(default_factory=dict)
    watcher: RunWatcher | None = None
    # The stall clock the executor runs (executors/stall_clock.py StallClock).
    stall_clock: dict[str, Any] | None = None
    # The probe's tool attaches to the command (Probe.ptrace).
    ptrace: bool = False


def run_once(
    session: Session,
    executor: Executor,
    job_config: JobConfig,
    *,
    command: list[str],
    workdir: Path,
    run_dir: Path,
    timeout_s: float | None,
    kind: RunKind,
    repetition: int,
    probe: str | None = None,
    test_id: str | None = None,
    wrapping: Wrapping | None = None,
) -> Measured:
    """Run ``command`` once in ``job_config`` and store it (with its test cases); the caller commits.

    A pytest command also writes JUnit XML into ``run_dir`` (made by the caller), read
    back into per-test durations. Executor errors (BadInput: the command cannot start)
    reach the caller before anything is stored.
    """
    wrapping = wrapping or Wrapping()
    is_pytest = pytest_command.is_pytest(command)
    junit_file = run_dir / pytest_command.JUNIT_FILE
    if is_pytest:
        command = pytest_command.with_junit(command, executor.visible_path(run_dir, pytest_command.JUNIT_FILE))
    result = executor.run(
        ExecutorRequest(
            command=wrapping.command(list(command)),
            workdir=workdir,
            config=cpu_config(job_config),
            run_dir=run_dir,
            timeout_s=timeout_s,
            env=wrapping.env,
            watcher=wrapping.watcher,
            job_id=job_config.job_id,
            stall_clock=wrapping.stall_clock,
            ptrace=wrapping.ptrace,
        )
    )
    cases, uncollected = pytest_command.read_junit(junit_file) if is_pytest else ([], [])
    workers = test_workers(executor, command, workdir, wrapping.env) if is_pytest else None
    if uncollected and result.output_tail is not None:
        # Each module and its exception first: the last lines of pytest's output rarely
        # reach the first one's (and the rule and the report read them from here).
        result = replace(
            result, output_tail=pytest_command.describe_collection_errors(uncollected) + result.output_tail
        )
    run = store_run(
        session, job_config, kind, repetition, result, cases, probe=probe, test_id=test_id, test_workers=workers
    )
    return Measured(run, result, cases, uncollected)


def test_workers(executor: Executor, command: list[str], workdir: Path, env: dict[str, str]) -> int | None:
    """How many processes the pytest command runs its tests in (pytest-xdist's workers),
    read now, while the checkout is here: the sum of its durations is held against the
    run's wall time that many times over (services/diagnose/timing_disagrees.py). ``-n
    auto`` counts the most CPUs the command could see."""
    cpus = max(os.cpu_count() or 1, len(executor.available_cpus()))
    ceiling = pytest_command.search_ceiling(executor.name)
    return pytest_workers.xdist_workers(command, workdir, ceiling, env, cpus)


def store_run(
    session: Session,
    job_config: JobConfig,
    kind: RunKind,
    repetition: int,
    result: RunResult,
    cases: list[TestCase],
    *,
    probe: str | None = None,
    test_id: str | None = None,
    test_workers: int | None = None,
) -> Run:
    """Store one run (timing, or evidence with the probe and test it ran) with its test cases
    and the processes that ran them at once (None: not known)."""
    run = Run(
        config=job_config,
        kind=kind,
        probe=probe,
        test_id=test_id,
        repetition=repetition,
        wall_s=result.wall_s,
        user_s=result.user_s,
        sys_s=result.sys_s,
        max_rss_kb=result.max_rss_kb,
        voluntary_ctx_switches=result.voluntary_ctx_switches,
        involuntary_ctx_switches=result.involuntary_ctx_switches,
        exit_code=result.exit_code,
        timed_out=result.timed_out,
        nr_periods=result.nr_periods,
        nr_throttled=result.nr_throttled,
        throttled_s=result.throttled_s,
        output_tail=result.output_tail,
        foreign_cpus=result.foreign_cpus,
        run_delay_s=result.run_delay_s,
        read_syscalls=result.read_syscalls,
        read_bytes=result.read_bytes,
        test_workers=test_workers,
        test_results=[
            TestResult(test_id=c.test_id, duration_s=c.duration_s, outcome=c.outcome, line=c.line) for c in cases
        ],
    )
    session.add(run)
    session.flush()
    return run
