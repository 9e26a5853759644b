"""The screen's numbers for one job, gathered from the database (the record).

Only runs that measured the program doing its work count: warm-up runs, runs that
timed out, runs that failed and runs a tracer ran beside (the census's survey run:
Run.traced) are kept in the record but left out here. A pytest run
that exited 1 (some test failed) still timed its passing tests correctly; those count,
the failed tests' cases do not (a failure path has its own latency).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from services.measure.configs import parse_cpulist
from services.measure.pytest_command import JUNIT_RESOLUTION_S, PYTEST_TESTS_FAILED, is_pytest
from services.measure.stats import Summary, median_interval
from services.models import COMMAND_KINDS, TEST_TIMING_KINDS, Job, Run, RunKind

# perf_counter-based wall times: far finer than any latency worth a verdict.
WALL_RESOLUTION_S = 1e-6


@dataclass
class JobSamples:
    # configuration label -> wall times of its successful timing runs, in run order
    wall: dict[str, list[float]] = field(default_factory=dict)
    # test id -> configuration label -> durations (skipped and failed cases left out)
    tests: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    # configuration label -> timing runs that failed or timed out (left out above)
    failed: dict[str, int] = field(default_factory=dict)
    # The CPUs other processes kept busy during each sample's run, aligned with ``wall``
    # and ``tests`` (Run.foreign_cpus): which runs a neighbour may have slowed or sped up.
    wall_load: dict[str, list[float]] = field(default_factory=dict)
    test_load: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    # configuration label -> its CPU quota (``--cpus``), for the configurations that have one
    quotas: dict[str, float] = field(default_factory=dict)
    # configuration label -> how many CPUs it pins the command to (``--cpuset-cpus``)
    pinned: dict[str, int] = field(default_factory=dict)
    # configuration label -> CPU time (user + sys) of each run, aligned with ``wall``
    cpu: dict[str, list[float]] = field(default_factory=dict)
    # configuration label -> the CPUs (CPU time over wall time) each run of the command
    # kept busy that ran to its end: the runs in ``wall``, and a pytest run that exited 1
    # because some test failed (its parallelism is the suite's all the same).
    shares: dict[str, list[float]] = field(default_factory=dict)
    # Tests a stopping rule cleared before they had the runs to be judged (the focused
    # screen's futility stop): in the false discovery rate's family with p = 1.
    cleared: set[str] = field(default_factory=set)
    # The clocks' resolution: a duration below it is too fast to judge.
    wall_resolution_s: float = WALL_RESOLUTION_S
    test_resolution_s: float = JUNIT_RESOLUTION_S

    def wall_summaries(self) -> dict[str, Summary]:
        return {label: median_interval(values) for label, values in self.wall.items() if values}

    def test_summaries(self, test_id: str) -> dict[str, Summary]:
        return {label: median_interval(values) for label, values in self.tests[test_id].items() if values}

    def series(self) -> list[tuple[str | None, dict[str, list[float]], float]]:
        """(test id or None for the whole command, per-configuration samples, resolution)."""
        return [
            (None, self.wall, self.wall_resolution_s),
            *((test_id, per_config, self.test_resolution_s) for test_id, per_config in self.tests.items()),
        ]

    def load(self, test_id: str | None, label: str) -> list[float] | None:
        """The neighbour load of each sample of a series, or None when it was not recorded."""
        loads = self.wall_load.get(label) if test_id is None else self.test_load.get(test_id, {}).get(label)
        values = self.wall.get(label) if test_id is None else self.tests.get(test_id, {}).get(label)
        return loads if loads is not None and values is not None and len(loads) == len(values) else None

    def cpu_share(self, label: str) -> float | None:
        """The CPUs the command kept busy in a configuration: the median of each run's
        CPU time over its wall time (2.0: two threads computing all along, or two xdist
        workers); None when the CPU time was not recorded.

        A pytest run in which some test failed counts: a suite with one failing test
        would otherwise have no share at all, and every test of it run by two xdist
        workers under cpus=0.5 would look 4x slower than the quota explains. The whole
        command's runs, not a focused run's: a narrowed process holding little but one
        test that spins two threads would count its own pathology as parallel work."""
        shares = self.shares.get(label)
        if shares:
            return statistics.median(shares)
        cpu, wall = self.cpu.get(label), self.wall.get(label)
        if not cpu or not wall or len(cpu) != len(wall):
            return None
        found = [c / w for c, w in zip(cpu, wall, strict=True) if w > 0]
        return statistics.median(found) if found else None


def surveyed(job: Job, traced: bool = False) -> dict[str, dict[str, list[float]]]:
    """Test id -> configuration label -> its passing durations in a suite's survey runs
    (services/measure/survey.py): all there is of a test the survey cleared. The census's
    traced run is left out, its durations the tracer's (``traced``: kept)."""
    found: dict[str, dict[str, list[float]]] = {}
    for config in job.configs:
        for run in config.runs:
            if run.kind is not RunKind.survey or (run.traced and not traced):
                continue
            for result in run.test_results:
                if result.outcome == "passed":
                    found.setdefault(result.test_id, {}).setdefault(config.label, []).append(result.duration_s)
    return found


def succeeded(run: Run) -> bool:
    return run.exit_code == 0 and not run.timed_out


def ran_through(run: Run) -> bool:
    """A run that measured its tests: it succeeded, or pytest ran the suite and some test
    failed (the passing tests were timed all the same)."""
    return succeeded(run) or (run.exit_code == PYTEST_TESTS_FAILED and not run.timed_out)


def _share(run: Run) -> float | None:
    """The CPUs a run kept busy (user + sys over wall); None where its CPU time is unknown."""
    if run.user_s is None or not run.wall_s or run.wall_s <= 0:
        return None
    return (run.user_s + (run.sys_s or 0.0)) / run.wall_s


def collect(job: Job, kind: RunKind = RunKind.timing) -> JobSamples:
    """The job's samples; ``kind`` RunKind.base: its pull request's base commit's.

    A surveyed suite (services/measure/survey.py) has its command timed by the survey's
    runs and its tests by the focused screen's."""
    samples = JobSamples()
    tests: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    test_load: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    pytest_run = is_pytest(job.command or [])
    command_kinds = COMMAND_KINDS if kind is RunKind.timing else (kind,)
    test_kinds = TEST_TIMING_KINDS if kind is RunKind.timing else (kind, RunKind.base_focus)
    for config in job.configs:
        if config.cpus is not None:
            samples.quotas[config.label] = config.cpus
        if config.cpuset:
            samples.pinned[config.label] = len(parse_cpulist(config.cpuset))
        timing_runs = [run for run in config.runs if run.kind in command_kinds and not run.traced]
        samples.wall[config.label] = [run.wall_s for run in timing_runs if succeeded(run)]
        samples.wall_load[config.label] = [run.foreign_cpus or 0.0 for run in timing_runs if succeeded(run)]
        samples.cpu[config.label] = [(run.user_s or 0.0) + (run.sys_s or 0.0) for run in timing_runs if succeeded(run)]
        samples.failed[config.label] = sum(not succeeded(run) for run in timing_runs)
        completed = [run for run in timing_runs if succeeded(run) or (pytest_run and ran_through(run))]
        samples.shares[config.label] = [share for run in completed if (share := _share(run)) is not None]
        for run in (run for run in config.runs if run.kind in test_kinds):
            if not ran_through(run) or run.traced:
                continue
            for result in run.test_results:
                if result.outcome == "passed":
                    tests[result.test_id][config.label].append(result.duration_s)
                    test_load[result.test_id][config.label].append(run.foreign_cpus or 0.0)
    samples.tests = {test_id: dict(per_config) for test_id, per_config in sorted(tests.items())}
    samples.test_load = {test_id: dict(per_config) for test_id, per_config in test_load.items()}
    if kind is RunKind.timing:
        samples.cleared = futility_cleared(job)
    return samples


def futility_cleared(job: Job) -> set[str]:
    """The tests the focused screen stopped rerunning (screen._futility_stop): in its
    first round, absent from its last (each shard's rounds on their own)."""
    rounds: dict[int | None, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    for config in job.configs:
        for run in config.runs:
            if run.kind is RunKind.focus:
                rounds[run.shard][run.repetition] |= {result.test_id for result in run.test_results}
    cleared: set[str] = set()
    for by_repetition in rounds.values():
        cleared |= by_repetition[min(by_repetition)] - by_repetition[max(by_repetition)]
    return cleared
