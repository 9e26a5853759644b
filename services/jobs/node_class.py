"""The node class a job's runs were measured on.

A test's latency depends on more than its code and its CPU configuration: on the CPU
model, on which CPUs the executor may use, and on the runner image (DESIGN.md section 1:
the same test took 11.9 s on one machine and 0.025 s on others). Runs of one test are
comparable only within one class, so each job records the class its screen ran on.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.jobs.ledger import cpu_model
from services.measure.configs import format_cpulist
from services.measure.executors import Executor
from services.models import Job


@dataclass(frozen=True)
class NodeClass:
    """What a test's latency depends on besides its code and its configuration."""

    cpu_model: str | None
    engine_cpus: str | None  # a cpuset list: "0-1"
    runner_image: str | None  # None: the local executor, the host itself

    @classmethod
    def of_job(cls, job: Job) -> NodeClass:
        return cls(job.cpu_model, job.engine_cpus, job.runner_image)

    @classmethod
    def of_executor(cls, executor: Executor) -> NodeClass:
        image = getattr(executor, "image", None) if executor.name == "docker" else None
        return cls(cpu_model(), format_cpulist(executor.available_cpus()), image)

    @property
    def known(self) -> bool:
        # Without the CPU model or the CPU set, runs of any machine could pass for it.
        return bool(self.cpu_model and self.engine_cpus)

    def record(self, job: Job) -> None:
        job.cpu_model, job.engine_cpus, job.runner_image = self.cpu_model, self.engine_cpus, self.runner_image
