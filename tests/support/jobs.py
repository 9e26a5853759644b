"""Jobs built in memory (no database) for rules judged on recorded tool output.

A rule reads a Job's configurations, runs and evidence through its relationships; the
ORM objects work unsaved, so a unit test gives them ids by hand and needs no session.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from services.diagnose.context import RuleContext
from services.models import Evidence, Job, JobConfig, Project, Run, RunKind, TestResult
from services.thresholds import Thresholds

DATA = Path(__file__).resolve().parents[1] / "unit" / "data"
_ids = itertools.count(1)


def recorded(name: str) -> str:
    return (DATA / name).read_text()


def job(command: list[str] | None = None, labels: tuple[str, ...] = ("cpuset=0", "cpuset=0-1", "cpus=0.5")) -> Job:
    built = Job(
        id=next(_ids),
        project=Project(name="unit"),
        command=command or ["python3", "program.py"],
        executor="local",
        repeat=5,
        notes=[],
    )
    built.configs = [JobConfig(id=next(_ids), position=i, label=label) for i, label in enumerate(labels)]
    return built


def timing_runs(
    config: JobConfig,
    walls: list[float],
    cpu_share: float = 0.05,
    switches_per_s: float = 5.0,
    tests: dict[str, float] | None = None,
) -> list[Run]:
    """Timing runs of the given wall times, each spending ``cpu_share`` of it on a CPU."""
    runs = []
    for repetition, wall in enumerate(walls):
        run = Run(
            id=next(_ids),
            kind=RunKind.timing,
            repetition=repetition,
            wall_s=wall,
            user_s=wall * cpu_share * 0.8,
            sys_s=wall * cpu_share * 0.2,
            max_rss_kb=10_000,
            voluntary_ctx_switches=int(wall * switches_per_s),
            involuntary_ctx_switches=0,
            exit_code=0,
        )
        run.test_results = [
            TestResult(test_id=test_id, duration_s=duration, outcome="passed")
            for test_id, duration in (tests or {}).items()
        ]
        config.runs.append(run)
        runs.append(run)
    return runs


def evidence(
    built: Job, config: JobConfig, kind: str, content: dict, wall_s: float = 3.0, test_id: str | None = None
) -> Evidence:
    """An evidence entry with the evidence run that produced it."""
    run = Run(
        id=next(_ids),
        kind=RunKind.evidence,
        repetition=0,
        wall_s=wall_s,
        user_s=0.0,
        sys_s=0.0,
        max_rss_kb=0,
        voluntary_ctx_switches=0,
        involuntary_ctx_switches=0,
        exit_code=0,
        probe=kind,
        test_id=test_id,
    )
    config.runs.append(run)
    entry = Evidence(
        id=next(_ids), kind=kind, content=content, config=config, config_id=config.id, run_id=run.id, test_id=test_id
    )
    built.evidence.append(entry)
    return entry


def context(built: Job, **thresholds) -> RuleContext:
    return RuleContext(built, Thresholds(**thresholds))
