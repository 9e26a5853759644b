"""What every rule reads: the stored job, its screen samples, its evidence, the thresholds."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from functools import cached_property
from typing import TypeVar

from services.evidence import CONTENT, EvidenceContent, EvidenceKind, EvidenceStatus
from services.measure.samples import JobSamples, collect, succeeded, surveyed
from services.models import COMMAND_KINDS, Evidence, Job, JobConfig, Run
from services.thresholds import Thresholds

Content = TypeVar("Content", bound=EvidenceContent)


@dataclass(frozen=True)
class DrillPair:
    """Configuration labels a subject's evidence compares: where it is slow, where it is
    fast (services/diagnose/pairs.py chooses them for the drill)."""

    slow: str
    fast: str
    # False: no symptom compares the two (a program slow everywhere, or one only a tracer
    # can judge): the drill's strace runs, whose counts do not depend on the configuration,
    # take one side (services/measure/drill.py).
    compared: bool = True

    @property
    def labels(self) -> list[str]:
        return list(dict.fromkeys([self.slow, self.fast]))


@dataclass
class RuleContext:
    job: Job
    thresholds: Thresholds

    @cached_property
    def samples(self) -> JobSamples:
        return collect(self.job)

    def timing_runs(self, config: JobConfig) -> list[Run]:
        """The configuration's timing runs that measured the program at work: a run that
        failed or timed out measured something else (the rules judge none of them but
        command_failed, which reads ``all_timing_runs``)."""
        return [run for run in self.all_timing_runs(config) if succeeded(run)]

    def all_timing_runs(self, config: JobConfig) -> list[Run]:
        """Every run that timed the whole command, passed or not: never one a tracer ran
        beside (the census's survey run), whose clock and outcome are the tracer's too."""
        return [run for run in config.runs if run.kind in COMMAND_KINDS and not run.traced]

    def evidence(self, kind: EvidenceKind | str) -> list[Evidence]:
        """The job's usable evidence of one kind (entries that say why a probe could not
        look are left out: they support no finding)."""
        return [e for e in self.job.evidence if e.kind == kind and e.parsed.ok]

    def evidence_of(
        self, model: type[Content], *, also: tuple[EvidenceStatus, ...] = ()
    ) -> list[tuple[Evidence, Content]]:
        """Usable evidence with its content typed: ``evidence_of(GdbContent)``; ``also``
        admits other statuses (a stall run that ended early still carries its looks)."""
        kind = next(kind for kind, known in CONTENT.items() if known is model)
        found = []
        for entry in self.job.evidence:
            if entry.kind != kind:
                continue
            content = entry.parsed
            if (content.ok or content.status in also) and isinstance(content, model):
                found.append((entry, content))
        return found

    @cached_property
    def _runs_by_id(self) -> dict[int, Run]:
        return {run.id: run for config in self.job.configs for run in config.runs}

    def run_of(self, evidence: Evidence) -> Run | None:
        return self._runs_by_id.get(evidence.run_id) if evidence.run_id else None

    def drill_pair(self, test_id: str | None) -> DrillPair | None:
        """The two configurations the drill took this subject's evidence in, slow side
        first by the screen's median; None unless there are two."""
        labels = {e.config.label for e in self.job.evidence if e.test_id == test_id and e.config is not None}
        medians = {label: self.timing_median(label, test_id) for label in labels}
        known = {label: median for label, median in medians.items() if median is not None}
        if len(known) < 2:
            return None
        return DrillPair(max(known, key=known.__getitem__), min(known, key=known.__getitem__))

    def timing_median(self, config_label: str, test_id: str | None) -> float | None:
        """The screen's median for a configuration, of the command or of one test (for a
        test a suite's survey cleared, its one survey run: a census may have sent it on)."""
        per_config = self.samples.tests.get(test_id, {}) if test_id else self.samples.wall
        values = per_config.get(config_label)
        if not values and test_id:
            values = self.surveyed.get(test_id, {}).get(config_label)
        return statistics.median(values) if values else None

    @cached_property
    def tests(self) -> list[str]:
        """Every test id the job's runs reported (evidence that names one of them belongs
        to it: services/diagnose/attribution.py)."""
        return sorted({r.test_id for config in self.job.configs for run in config.runs for r in run.test_results})

    @cached_property
    def surveyed(self) -> dict[str, dict[str, list[float]]]:
        """Test id -> configuration label -> its durations in the survey's runs."""
        return surveyed(self.job)


def subject(test_id: str | None) -> str:
    return test_id or "The command"


def where(evidence: Evidence) -> str:
    label = evidence.config.label if evidence.config else "?"
    return f"{label}, {evidence.test_id}" if evidence.test_id else label
