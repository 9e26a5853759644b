"""A git repository with a pull request: its base commit, and a head that changes one test."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

SPEED_TESTS = """import time


def test_steady():
    time.sleep(0.04)


def test_target():
    time.sleep({target})
"""
TEST_FILE = "tests/test_speed.py"
TARGET = f"{TEST_FILE}::test_target"
TARGET_LINE = 8  # where `def test_target` is


@dataclass
class PullRequestRepository:
    url: str
    base: str
    head: str


FILLER = """import pytest


@pytest.mark.parametrize("n", range({count}))
def test_filler(n):
    assert sum(range(n * 100)) >= 0
"""


def make_pull_request(
    path: Path,
    lagtrace_yml: str,
    base_s: float | str,
    head_s: float | str,
    filler: int = 0,
    files: dict[str, str] | None = None,
    head_files: dict[str, str] | None = None,
    speed_tests: str = SPEED_TESTS,
) -> PullRequestRepository:
    """main holds tests/test_speed.py with test_target sleeping ``base_s`` (and ``filler``
    more quick tests in tests/test_filler.py, and ``files`` by path); the head commit (on
    branch `slower`) makes it sleep ``head_s`` and adds ``head_files``. ``speed_tests``: the
    test file's text, its ``{target}`` filled with ``base_s``, then ``head_s``. Returns the
    file:// URL and both commits."""
    (path / "tests").mkdir(parents=True)
    (path / ".lagtrace.yml").write_text(lagtrace_yml)
    for name, text in (files or {}).items():
        (path / name).write_text(text)
    if filler:
        (path / "tests" / "test_filler.py").write_text(FILLER.format(count=filler))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(path)]

    def commit(target: float | str, message: str) -> str:
        (path / TEST_FILE).write_text(speed_tests.format(target=target))
        subprocess.run([*git, "add", "."], check=True)
        subprocess.run([*git, "commit", "-qm", message], check=True)
        return subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()

    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    base = commit(base_s, "base")
    subprocess.run([*git, "checkout", "-qb", "slower"], check=True)
    for name, text in (head_files or {}).items():
        (path / name).write_text(text)
    head = commit(head_s, "slower target")
    return PullRequestRepository(f"file://{path}", base, head)


def pull_request_payload(repository: PullRequestRepository, number: int = 7, full_name: str = "octo/demo") -> dict:
    return {
        "action": "opened",
        "pull_request": {
            "number": number,
            "html_url": f"https://github.com/{full_name}/pull/{number}",
            "head": {"sha": repository.head, "ref": "slower", "repo": {"full_name": full_name}},
            "base": {"sha": repository.base, "ref": "main"},
        },
        "repository": {"full_name": full_name, "clone_url": repository.url},
    }
