"""Splitting a suite into shards (services/measure/shards.py): real pytest collections,
real runs through the local executor on a worker's own CPUs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from services.errors import BadInput
from services.measure.configs import CpuConfig
from services.measure.executors.base import RunRequest
from services.measure.executors.local import LocalExecutor
from services.measure.shards import Collected, balance, collect, on_worker_cpus, parse_collection, shard_command
from services.settings import Settings
from tests.bench.bench_suites import build_suite


def suite(tmp_path: Path, seconds: float = 0.5) -> Path:
    folder = tmp_path / "suite"
    build_suite(folder, seconds)
    return folder


def test_the_collection_lists_every_file_with_its_tests_in_either_verbosity(tmp_path):
    folder = suite(tmp_path, 2.0)
    executor = LocalExecutor(Settings())
    plain = collect(executor, [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "."], folder, 60)
    quiet = collect(executor, [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "."], folder, 60)
    assert isinstance(plain, Collected) and isinstance(quiet, Collected), (plain, quiet)
    files = sorted(p.name for p in folder.glob("test_*.py"))
    assert sorted(plain.counts) == sorted(quiet.counts) == files
    assert plain.counts == quiet.counts
    # Node ids where pytest printed them; counts alone under -qq.
    assert all(len(ids) == plain.counts[file] for file, ids in plain.files.items())
    assert "test_part_000.py::test_planted_bimodal" in plain.files["test_part_000.py"]


def test_a_suite_that_cannot_be_collected_is_not_split(tmp_path):
    (tmp_path / "test_broken.py").write_text("import nowhere_to_be_found\n")
    found = collect(LocalExecutor(Settings()), [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"], tmp_path, 60)
    assert isinstance(found, str) and "exited 2" in found


def test_count_balance_keeps_files_whole_and_the_suites_order():
    collected = parse_collection("a.py: 50\nb.py: 50\nc.py: 40\nd.py: 10\n")
    shards = balance(collected, 2)
    # Longest first to the lightest shard: 90 and 60 tests is the best split of these files.
    assert [shard.arguments for shard in shards] == [["a.py", "c.py"], ["b.py", "d.py"]]
    assert [shard.test_count for shard in shards] == [90, 60]
    assert all(shard.planned_s is None for shard in shards)


def test_durations_balance_and_split_a_file_heavier_than_a_shards_share():
    output = "\n".join(
        [*(f"slow.py::test_{i}" for i in range(4)), *(f"fast.py::test_{i}" for i in range(20)), "new.py::test_0"]
    )
    durations = {**{f"slow.py::test_{i}": 5.0 for i in range(4)}, **{f"fast.py::test_{i}": 0.1 for i in range(20)}}
    shards = balance(parse_collection(output), 2, durations)
    # slow.py alone is 20 s of 22.2: its tests are dealt to both shards as node ids.
    assert sorted(len([a for a in s.arguments if a.startswith("slow.py::")]) for s in shards) == [2, 2]
    loads = [s.planned_s for s in shards]
    assert all(load is not None for load in loads)
    assert abs(loads[0] - loads[1]) <= 2.0, loads
    # Every test is in exactly one shard; the new test is weighed as a typical one.
    assert sum(s.test_count for s in shards) == 25
    assert sum("new.py" in s.arguments for s in shards) == 1


def test_a_shards_command_runs_only_its_tests(tmp_path):
    folder = suite(tmp_path)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "."]
    collected = collect(LocalExecutor(Settings()), command, folder, 60)
    assert isinstance(collected, Collected)
    shards = balance(collected, 2)
    narrowed = shard_command(command, shards[0].arguments, folder)
    assert "." not in narrowed and narrowed[-len(shards[0].arguments) :] == shards[0].arguments
    again = collect(LocalExecutor(Settings()), narrowed, folder, 60)
    assert isinstance(again, Collected) and again.tests == shards[0].test_count


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_a_worker_pins_its_configurations_to_its_own_cpus(tmp_path):
    last = max(os.sched_getaffinity(0))
    executor = on_worker_cpus(LocalExecutor(Settings()), str(last))
    assert executor.available_cpus() == (0,)
    affinity = [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"]
    for config in (CpuConfig("cpuset=0", cpuset=(0,)), CpuConfig("unpinned")):
        run_dir = tmp_path / config.label
        run_dir.mkdir()
        result = executor.run(RunRequest(command=affinity, workdir=tmp_path, config=config, run_dir=run_dir))
        assert result.exit_code == 0
        assert (run_dir / "output.log").read_text().strip() == f"[{last}]", config
    with pytest.raises(BadInput, match="not available"):
        on_worker_cpus(LocalExecutor(Settings()), "4096")
