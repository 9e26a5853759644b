"""The screen's numbers for one job, gathered from the database (the record)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from services.measure.stats import Summary, median_interval
from services.models import Job, RunKind


@dataclass
class JobSamples:
    # configuration label -> wall times of its timing runs, in run order
    wall: dict[str, list[float]] = field(default_factory=dict)
    # test id -> configuration label -> durations (skipped cases left out)
    tests: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def wall_summaries(self) -> dict[str, Summary]:
        return {label: median_interval(values) for label, values in self.wall.items() if values}

    def test_summaries(self, test_id: str) -> dict[str, Summary]:
        return {label: median_interval(values) for label, values in self.tests[test_id].items() if values}


def collect(job: Job) -> JobSamples:
    samples = JobSamples()
    tests: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for config in job.configs:
        timing_runs = [run for run in config.runs if run.kind == RunKind.timing]
        samples.wall[config.label] = [run.wall_s for run in timing_runs]
        for run in timing_runs:
            for result in run.test_results:
                if result.outcome != "skipped":
                    tests[result.test_id][config.label].append(result.duration_s)
    samples.tests = {test_id: dict(per_config) for test_id, per_config in sorted(tests.items())}
    return samples
