"""Shards of a pytest suite (docs/guides/service.md): which tests each worker screens, and on which CPUs.

A suite is split by test file, the unit pytest collects and sets up together (module
fixtures run once per shard, not once per test); a file heavier than a shard's fair share
is split into its node ids. Files are weighed by their tests' durations in the project's
previous job where there is one (the survey's and the focused screen's), else by their
test count, and dealt longest first to the lightest shard (LPT: within 4/3 of the best
split). Each shard keeps the suite's own order.

``WorkerCpus`` is an executor seen through one worker's own CPUs
(LAGTRACE_WORKER_CPUS): two workers on one machine, each given its own cores, then pin
their configurations to disjoint cores and never measure on each other's.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from services.errors import BadInput
from services.measure import pytest_command
from services.measure.configs import CpuConfig, format_cpulist, parse_cpulist
from services.measure.executors.base import Executor, RunRequest, RunResult

# `pytest --collect-only -q` prints node ids; with the command's own -q (-qq), one
# "path: count" line per file.
_FILE_COUNT = re.compile(r"^(?P<file>\S+\.py): (?P<count>\d+)$")


@dataclass(frozen=True)
class Collected:
    """The suite as pytest collects it: each file's node ids, or only how many it holds."""

    files: dict[str, list[str]]  # file -> node ids (empty when only counted)
    counts: dict[str, int]

    @property
    def tests(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True)
class Shard:
    arguments: list[str]  # test files and node ids, in suite order
    test_count: int
    planned_s: float | None  # its share of one round by the durations; None: by count


def parse_collection(output: str) -> Collected:
    files: dict[str, list[str]] = {}
    counts: dict[str, int] = {}
    for raw in output.splitlines():
        line = raw.strip()
        if "::" in line and " " not in line:
            file = line.split("::", 1)[0]
            files.setdefault(file, []).append(line)
            counts[file] = counts.get(file, 0) + 1
        elif match := _FILE_COUNT.match(line):
            files.setdefault(match["file"], [])
            counts[match["file"]] = counts.get(match["file"], 0) + int(match["count"])
    return Collected(files, counts)


def collect(executor: Executor, command: list[str], workdir: Path, timeout_s: float | None) -> Collected | str:
    """The suite's files and tests (one `--collect-only` run, no test executed); a string
    says why they could not be read."""
    run_dir = Path(tempfile.mkdtemp(prefix="lagtrace-collect-"))
    run_dir.chmod(0o777)  # the docker executor's runner writes its output here
    try:
        result = executor.run(
            RunRequest(
                command=[*command, "--collect-only", "-q"],
                workdir=workdir,
                config=CpuConfig(label="collect"),
                run_dir=run_dir,
                timeout_s=timeout_s,
            )
        )
        output = (run_dir / "output.log").read_text(errors="replace") if (run_dir / "output.log").exists() else ""
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    if result.exit_code != 0 or result.timed_out:
        return f"collecting the suite exited {result.exit_code}{' (timed out)' if result.timed_out else ''}"
    collected = parse_collection(output)
    if not collected.counts:
        return "the suite's collection listed no test files"
    return collected


def balance(collected: Collected, count: int, durations: dict[str, float] | None = None) -> list[Shard]:
    """At most ``count`` shards of about equal weight; ``durations`` (test id -> seconds a
    round costs it) weighs the tests, a test it lacks weighing the median of those it has."""
    if count < 1:
        raise ValueError("count must be at least 1")
    order = list(collected.counts)
    known = [seconds for test, seconds in (durations or {}).items() if test.split("::", 1)[0] in collected.counts]
    typical = statistics.median(known) if known else None

    # Files collected only by count (-qq): their tests as the durations name them.
    by_file: dict[str, list[str]] = {}
    for test in durations or {}:
        by_file.setdefault(test.split("::", 1)[0], []).append(test)

    def weight(file: str, tests: list[str]) -> float:
        if typical is None or durations is None:
            return float(len(tests) or collected.counts[file])
        if not tests and file in by_file:
            measured = sum(durations[test] for test in by_file[file])
            return measured + typical * max(0, collected.counts[file] - len(by_file[file]))
        return sum(durations.get(test, typical) for test in tests) if tests else typical * collected.counts[file]

    # (argument, its tests, its weight, position in the suite)
    units: list[tuple[str, int, float, tuple[int, int]]] = []
    total = sum(weight(file, collected.files[file]) for file in order)
    for position, file in enumerate(order):
        tests = collected.files[file]
        heavy = weight(file, tests) > total / count and len(tests) > 1
        if heavy:
            for place, test in enumerate(tests):
                units.append((test, 1, weight(file, [test]), (position, place)))
        else:
            units.append((file, collected.counts[file], weight(file, tests), (position, 0)))
    loads = [0.0] * count
    chosen: list[list[tuple[str, int, float, tuple[int, int]]]] = [[] for _ in range(count)]
    for unit in sorted(units, key=lambda u: (-u[2], u[3])):
        lightest = min(range(count), key=lambda i: (loads[i], i))
        loads[lightest] += unit[2]
        chosen[lightest].append(unit)
    return [
        Shard(
            [unit[0] for unit in sorted(parts, key=lambda u: u[3])],
            sum(unit[1] for unit in parts),
            round(load, 3) if typical is not None else None,
        )
        for parts, load in zip(chosen, loads, strict=True)
        if parts
    ]


def shard_command(command: list[str], arguments: list[str], workdir: Path) -> list[str]:
    """The suite's command narrowed to one shard's files and node ids."""
    return pytest_command.narrow_to_tests(command, arguments, workdir)


class WorkerCpus:
    """``inner`` seen through this worker's CPUs: a configuration's cpuset names the i-th of
    them, and a configuration without one is pinned to all of them."""

    def __init__(self, inner: Executor, cpus: tuple[int, ...]):
        self.inner, self.cpus = inner, cpus
        self.name = inner.name

    def physical(self, config: CpuConfig) -> CpuConfig:
        if config.cpuset is None:
            return dataclasses.replace(config, cpuset=self.cpus)
        return dataclasses.replace(config, cpuset=tuple(self.cpus[i] for i in config.cpuset))

    def available_cpus(self) -> tuple[int, ...]:
        return tuple(range(len(self.cpus)))

    def quota_unsupported_reason(self) -> str | None:
        return self.inner.quota_unsupported_reason()

    def prepare(self, workdir: Path, progress: Callable[[str], None]) -> None:
        self.inner.prepare(workdir, progress)

    def check_command(self, command: list[str], workdir: Path) -> None:
        self.inner.check_command(command, workdir)

    def visible_path(self, run_dir: Path, name: str = "") -> str:
        return self.inner.visible_path(run_dir, name)

    def repository_paths(self, text: str) -> str:
        return self.inner.repository_paths(text)

    def tool_path(self, name: str) -> str | None:
        return self.inner.tool_path(name)

    def run(self, request: RunRequest) -> RunResult:
        return self.inner.run(dataclasses.replace(request, config=self.physical(request.config)))


def on_worker_cpus(executor: Executor, worker_cpus: str | None) -> Executor:
    """``executor`` limited to LAGTRACE_WORKER_CPUS (unchanged when it is unset); the CPUs
    named must be ones the executor has."""
    if not worker_cpus:
        return executor
    cpus = parse_cpulist(worker_cpus)
    missing = sorted(set(cpus) - set(executor.available_cpus()))
    if missing:
        raise BadInput(f"LAGTRACE_WORKER_CPUS={worker_cpus}: CPU {format_cpulist(missing)} is not available here")
    return WorkerCpus(executor, cpus)
