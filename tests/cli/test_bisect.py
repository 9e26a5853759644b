"""`lagtrace bisect` end to end: a real git repository of 16 commits, one of which makes
a test twice as slow, bisected by the CLI as a process running real pytest runs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import PYTHON, run_cli
from tests.support.bisect_history import commit_series

COMMITS = 16
SLOWER_FROM = 9  # the commit (0-based) that makes test_slow sleep 0.2 s instead of 0.1 s
COMMAND = ["--", PYTHON, "-m", "pytest", "-q", "test_work.py"]
TEST = ["--test", "test_work.py::test_slow"]
TEST_FILE = """import time


def test_slow():
    time.sleep({seconds})


def test_other():
    pass
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> tuple[Path, list[str]]:
    """The repository and its commits, oldest first: each changes notes.txt, and commit
    SLOWER_FROM also doubles test_slow's sleep."""
    repo = tmp_path_factory.mktemp("history")
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "bisect@example.com")
    git(repo, "config", "user.name", "bisect")
    shas = []
    for index in range(COMMITS):
        (repo / "test_work.py").write_text(TEST_FILE.format(seconds=0.2 if index >= SLOWER_FROM else 0.1))
        (repo / "notes.txt").write_text(f"change {index}\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"change {index}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    return repo, shas


@pytest.mark.latency
def test_the_commit_that_made_a_test_twice_as_slow_is_named(history, sqlite_url, tmp_path):
    repo, shas = history
    out = tmp_path / "bisect.json"
    args = ["--repo", str(repo), "--good", shas[0], "--bad", shas[-1], *TEST, "--config", "cpuset=0"]
    result = run_cli(["bisect", *args, "--json", str(out), *COMMAND], sqlite_url, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"culprit: {shas[SLOWER_FROM][:10]} 'change {SLOWER_FROM}'"), result.stdout
    assert "slower in cpuset=0" in result.stdout and "\ncost: " in result.stdout, result.stdout

    found = json.loads(out.read_text())
    assert found["verdict"] == "culprit" and found["culprit"] == shas[SLOWER_FROM], found["reason"]
    assert found["culprit_parent"] == shas[SLOWER_FROM - 1] and found["direction"] == "slower"
    assert found["config"] == "cpuset=0" and found["test"] == "test_work.py::test_slow"
    assert 1.6 < found["ratio_low"] <= found["ratio"] <= found["ratio_high"] < 2.4, found
    # Every run is recorded, with the commit it ran at, and far fewer than every commit's.
    runs = found["runs"]
    assert len(runs) == found["cost"]["runs"] < COMMITS * 5 / 2
    assert {run["commit"] for run in runs} == {commit["sha"] for commit in found["commits"]}
    for run in runs:
        expected = 0.2 if shas.index(run["commit"]) >= SLOWER_FROM else 0.1
        assert expected <= run["duration_s"] < expected * 1.5, run
    assert found["cost"]["says"].startswith(f"{len(runs)} runs, ") and found["cost"]["says"].endswith("the test's time")
    # One progress line per commit measured, and the worktrees are gone.
    assert result.stderr.count(" runs, median ") >= len(found["commits"]), result.stderr
    assert git(repo, "worktree", "list").count("\n") == 0


@pytest.mark.latency
def test_a_range_where_nothing_changed_has_no_culprit(history, sqlite_url, tmp_path):
    repo, shas = history
    out = tmp_path / "bisect.json"
    args = ["--repo", str(repo), "--good", shas[0], "--bad", shas[SLOWER_FROM - 1], *TEST]
    result = run_cli(["bisect", *args, "--json", str(out), *COMMAND], sqlite_url, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("no culprit: test_work.py::test_slow"), result.stdout
    found = json.loads(out.read_text())
    assert found["verdict"] == "no_culprit" and found["culprit"] is None, found["reason"]
    # The ends alone, to the first look that can decide.
    assert [commit["sha"] for commit in found["commits"]] == [shas[0], shas[SLOWER_FROM - 1]]
    assert len(found["runs"]) == 10


@pytest.mark.parametrize(
    ("change", "says"),
    [
        pytest.param({"--repo": "NOT_A_REPO"}, "not a git repository", id="not-a-repo"),
        pytest.param({"--good": "no-such-rev"}, "--good no-such-rev: no such commit", id="unknown-good"),
        pytest.param({"--bad": "no-such-rev"}, "--bad no-such-rev: no such commit", id="unknown-bad"),
        pytest.param({"--good": "LAST", "--bad": "FIRST"}, "is not an ancestor of --bad", id="good-after-bad"),
        pytest.param({"--config": "cpuset=x"}, "--config cpuset='x': 'x' is not a CPU number", id="bad-cpuset"),
        pytest.param({"--config": "cores=2"}, "--config cores=2: unknown key", id="unknown-key"),
    ],
)
def test_bad_input_exits_2_naming_the_argument(history, sqlite_url, tmp_path, change, says):
    repo, shas = history
    options = {"--repo": str(repo), "--good": shas[0], "--bad": shas[-1], "--config": "cpuset=0"}
    options |= {key: {"FIRST": shas[0], "LAST": shas[-1]}.get(value, value) for key, value in change.items()}
    if options["--repo"] == "NOT_A_REPO":
        options["--repo"] = str(tmp_path)
    args = [part for pair in options.items() for part in pair]
    result = run_cli(["bisect", *args, *TEST, *COMMAND], sqlite_url, timeout=60)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert says in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert result.stdout == ""


# A program that is no pytest suite: its wall time is what the search compares. Commit 3
# of 6 makes its work take 0.25 s instead of 0.1 s.
APP = "import time\n\ntime.sleep({seconds})\nprint('done')\n"


@pytest.mark.latency
def test_a_plain_program_is_bisected_on_its_wall_time(sqlite_url, tmp_path):
    repo = tmp_path / "app"
    shas = commit_series(repo, 6, lambda index: {"app.py": APP.format(seconds=0.25 if index >= 3 else 0.1)})
    out = tmp_path / "bisect.json"
    args = ["--repo", str(repo), "--good", shas[0], "--bad", shas[-1], "--config", "cpuset=0"]
    result = run_cli(["bisect", *args, "--json", str(out), "--", PYTHON, "app.py"], sqlite_url, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"culprit: {shas[3][:10]} 'change 3'"), result.stdout
    assert "made the command slower in cpuset=0" in result.stdout, result.stdout
    found = json.loads(out.read_text())
    assert found["culprit"] == shas[3] and found["test"] is None, found
    # The runs are the program's whole wall time, start-up included.
    for run in found["runs"]:
        expected = 0.25 if shas.index(run["commit"]) >= 3 else 0.1
        assert expected < run["duration_s"] < expected + 0.5, run
    assert found["cost"]["says"].endswith("the command's time"), found["cost"]


def test_a_test_needs_a_pytest_command(history, sqlite_url):
    repo, shas = history
    args = ["--repo", str(repo), "--good", shas[0], "--bad", shas[-1], *TEST, "--", PYTHON, "app.py"]
    result = run_cli(["bisect", *args], sqlite_url, timeout=60)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "--test test_work.py::test_slow: COMMAND" in result.stderr and "leave --test out" in result.stderr
