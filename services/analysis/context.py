"""What every rule reads: the stored job, its screen samples and the thresholds."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from services.models import Job, JobConfig, Run, RunKind
from services.samples import JobSamples, collect
from services.thresholds import Thresholds


@dataclass
class RuleContext:
    job: Job
    thresholds: Thresholds

    @cached_property
    def samples(self) -> JobSamples:
        return collect(self.job)

    def timing_runs(self, config: JobConfig) -> list[Run]:
        return [run for run in config.runs if run.kind == RunKind.timing]
