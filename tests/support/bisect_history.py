"""A git repository whose history slows one test at one commit: what a bisect searches
(tests/cli/test_bisect.py makes its own, the same, for the CLI)."""

from __future__ import annotations

import subprocess
from pathlib import Path

TEST_FILE = """import time


def test_slow():
    time.sleep({seconds})


def test_other():
    pass
"""
TARGET = "test_work.py::test_slow"


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def make_history(
    repo: Path, commits: int, slower_from: int, *, fast_s: float = 0.1, slow_s: float = 0.2, lagtrace_yml: str = ""
) -> list[str]:
    """``commits`` commits on ``main``, oldest first: each changes notes.txt, and from commit
    ``slower_from`` (0-based) test_slow sleeps ``slow_s`` instead of ``fast_s``. With
    ``lagtrace_yml``, every commit has that .lagtrace.yml."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "bisect@example.com")
    git(repo, "config", "user.name", "bisect")
    shas = []
    for index in range(commits):
        (repo / "test_work.py").write_text(TEST_FILE.format(seconds=slow_s if index >= slower_from else fast_s))
        (repo / "notes.txt").write_text(f"change {index}\n")
        if lagtrace_yml:
            (repo / ".lagtrace.yml").write_text(lagtrace_yml)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"change {index}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    return shas
