"""A pull request's shard on its base commit (services/jobs/shards.py): the shard's tests
that the base has, from a real collection of the base checkout."""

from __future__ import annotations

import sys
from pathlib import Path

from services.jobs.shards import base_side
from services.measure.executors.local import LocalExecutor
from services.measure.screen import BaseSide
from services.models import Job, JobShard
from services.settings import Settings

COMMAND = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "tests"]


def checkout(path: Path, files: dict[str, str]) -> Path:
    (path / "tests").mkdir(parents=True)
    for name, body in files.items():
        (path / "tests" / name).write_text(body)
    return path


def test_a_shard_runs_on_the_base_only_the_files_and_node_ids_the_base_has(tmp_path):
    # The head added test_new.py and test_a.py::test_three; the shard holds some of each.
    base = checkout(
        tmp_path / "base",
        {
            "test_a.py": "def test_one():\n    pass\n\n\ndef test_two():\n    pass\n",
            "test_b.py": "def test_b():\n    pass\n",
        },
    )
    shard = JobShard(
        index=2,
        tests=["tests/test_a.py::test_two", "tests/test_a.py::test_three", "tests/test_b.py", "tests/test_new.py"],
    )
    job = Job(command=COMMAND, timeout_s=60, notes=[])
    side = base_side(BaseSide(base, LocalExecutor(Settings()), lambda labels: []), job, shard)
    assert side is not None
    assert side.command == [*COMMAND[:-1], "tests/test_a.py::test_two", "tests/test_b.py"]


def test_a_shard_of_tests_the_base_has_none_of_compares_nothing(tmp_path):
    base = checkout(tmp_path / "base", {"test_b.py": "def test_b():\n    pass\n"})
    job = Job(command=COMMAND, timeout_s=60, notes=[])
    shard = JobShard(index=1, tests=["tests/test_new.py"])
    side = base_side(BaseSide(base, LocalExecutor(Settings()), lambda labels: []), job, shard)
    assert side is None
    # The shard's own note, folded into the job's when the last shard finishes.
    assert shard.notes == ["shard 1: none of its tests is on the base commit, nothing to compare"]
    assert job.notes == []
