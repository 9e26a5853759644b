"""A git repository whose history slows one test at one commit: what a bisect searches
(tests/cli/test_bisect.py makes its own, the same, for the CLI)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
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
    files = {".lagtrace.yml": lagtrace_yml} if lagtrace_yml else {}
    return commit_series(
        repo,
        commits,
        lambda index: {**files, "test_work.py": TEST_FILE.format(seconds=slow_s if index >= slower_from else fast_s)},
    )


def commit_series(repo: Path, commits: int, files_at: Callable[[int], dict[str, str]]) -> list[str]:
    """A new repository of ``commits`` commits on ``main``, oldest first, each writing
    ``files_at(index)`` and changing notes.txt; their shas."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "bisect@example.com")
    git(repo, "config", "user.name", "bisect")
    shas = []
    for index in range(commits):
        for name, text in {**files_at(index), "notes.txt": f"change {index}\n"}.items():
            (repo / name).write_text(text)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"change {index}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    return shas


# Three tests whose times change at two commits (tests/bench/bench_bisect.py): test_slow
# sleeps twice as long from one commit on; test_handoff becomes CPU-sensitive at another
# (examples/handoff.py's pattern: an echo thread hands a token back and forth while a
# thread crunches, which costs a switch interval a round trip when the two threads sit
# on two cores, and next to nothing on one); test_steady never changes.
THREE_TESTS_FILE = """import queue
import threading
import time

ROUND_TRIPS = {round_trips}


def _crunch(stop):
    count = 0
    while not stop.is_set():
        count += 1


def _echo(inbox, outbox):
    while (item := inbox.get()) is not None:
        outbox.put(item)


def _round_trips_alone(count):
    # The same round trips, in one thread: no hand-off, no core to wait on.
    box = queue.Queue()
    for i in range(count):
        box.put(i)
        box.get()


def _round_trips_handed_off(count):
    stop = threading.Event()
    computing = threading.Thread(target=_crunch, args=(stop,))
    ping, pong = queue.Queue(), queue.Queue()
    echoing = threading.Thread(target=_echo, args=(ping, pong))
    computing.start()
    echoing.start()
    try:
        for i in range(count):
            ping.put(i)
            pong.get()
    finally:
        ping.put(None)
        echoing.join()
        stop.set()
        computing.join()


def test_slow():
    time.sleep({slow_s})


def test_handoff():
    time.sleep({handoff_base_s})
    {handoff}(ROUND_TRIPS)


def test_steady():
    time.sleep({steady_s})
"""


def make_two_change_history(
    repo: Path,
    commits: int,
    slower_from: int,
    handoff_from: int,
    *,
    fast_s: float = 0.1,
    slow_s: float = 0.2,
    handoff_base_s: float = 0.1,
    round_trips: int = 40,
    steady_s: float = 0.1,
) -> list[str]:
    """``commits`` commits on ``main``, oldest first, of test_work.py's three tests: from
    commit ``slower_from`` (0-based) test_slow sleeps ``slow_s`` instead of ``fast_s``; from
    commit ``handoff_from`` test_handoff makes its ``round_trips`` through an echo thread
    while a thread crunches (before, in its own thread); test_steady never changes."""
    return commit_series(
        repo,
        commits,
        lambda index: {
            "test_work.py": THREE_TESTS_FILE.format(
                round_trips=round_trips,
                slow_s=slow_s if index >= slower_from else fast_s,
                handoff_base_s=handoff_base_s,
                handoff="_round_trips_handed_off" if index >= handoff_from else "_round_trips_alone",
                steady_s=steady_s,
            )
        },
    )
