"""A job's plan: everything the user gave (command, configurations, repetitions, limits,
probes) checked against the executor before anything is stored; BadInput says what is
wrong. ``lagtrace run`` plans before it stores its job, the service's prepare step after
reading .lagtrace.yml (services/jobs/engine.py ``prepare_step``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from services.errors import BadInput
from services.jobs.workspace import Progress
from services.measure.configs import CpuConfig, default_matrix, parse_specs
from services.measure.drill import parse_evidence
from services.measure.executors import Executor


def _quiet(message: str) -> None:
    pass


@dataclass
class JobPlan:
    command: list[str]
    workdir: Path
    configs: list[CpuConfig]
    repeat: int
    timeout_s: float | None
    notes: list[str] = field(default_factory=list)
    probes: list[str] | None = None  # probe names; None: the default (all, where the screen found something)
    stall_after_s: float | None = None
    budget_s: float | None = None  # None: the default (services/measure/budget.py)


def plan_job(
    executor: Executor,
    *,
    command: list[str],
    specs: list[str],
    repeat: int,
    timeout_s: float | None,
    workdir: Path,
    evidence: str | None = None,
    stall_after_s: float | None = None,
    progress: Progress = _quiet,
    machine: str = "this machine",
    budget_s: float | None = None,
) -> JobPlan:
    """Check everything the user gave before anything is stored; BadInput says what is wrong."""
    if repeat < 1:
        raise BadInput(f"--repeat must be at least 1, not {repeat}")
    if timeout_s is not None and timeout_s <= 0:
        raise BadInput(f"--timeout must be a positive number of seconds, not {timeout_s:g}")
    if budget_s is not None and not budget_s > 0:
        raise BadInput(f"--budget must be a positive number of seconds, not {budget_s:g}")
    if stall_after_s is not None and stall_after_s <= 0:
        raise BadInput(f"--stall-after must be a positive number of seconds, not {stall_after_s:g}")
    if stall_after_s is not None and timeout_s is not None and stall_after_s >= timeout_s:
        raise BadInput(
            f"--stall-after {stall_after_s:g} must be below --timeout {timeout_s:g}: "
            "the snapshot is taken while the run is still going"
        )
    probes = parse_evidence(evidence)
    # Before the command check: the program may come from the dependencies installed here.
    executor.prepare(workdir, progress)
    executor.check_command(command, workdir)
    available = executor.available_cpus()
    quota_problem = executor.quota_unsupported_reason()
    if executor.name == "docker":
        # The runs live in the engine's cgroup: its CPU set is what counts, not the machine's.
        machine = f"{machine}'s Docker engine"
    notes = []
    if specs:
        configs = parse_specs(specs, available, machine)
        for config in configs:
            if config.cpus is not None and quota_problem:
                raise BadInput(f"{config.label}: CPU quotas cannot be enforced on {machine}: {quota_problem}")
    else:
        configs = default_matrix(available, quota_supported=quota_problem is None)
        if quota_problem:
            notes.append(f"the default cpus=0.5 configuration was left out: {quota_problem}")
    return JobPlan(command, workdir, configs, repeat, timeout_s, notes, probes, stall_after_s, budget_s)
