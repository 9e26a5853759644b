"""Warm runs for narrowed pytest processes: each test's first run in a fresh process is
kept apart from the run that is timed.

A test's first run in a process pays the process's one-time work: the imports its code
pulls in lazily, pytest's assertion rewriting of the helper modules it imports, caches
filled on first use, a session fixture's set-up. In a focused run (the survey's kept
tests rerun together, narrowed) which test runs first, and so pays it, changes when the
futility stop narrows the set further: a web framework's websocket tests were "2 of 9
runs 16.4x slower" and "7 of 9 runs 6.6x slower" for that alone, with ``ast.parse`` as
their hot path. So a small pytest plugin (loaded with ``-p``, from a directory lagtrace
puts first on PYTHONPATH, as probes/amplify.py does) runs each selected test twice in a
row in its process: the first run (the cold one) silently, its duration written to a
file beside the run; the second (warm) is the one reported to JUnit and timed. A test
whose warm run fails where its cold run passed cannot be repeated in one process: its
cold run is reported, as it would have been without the plugin.

The one-time cost is reported once, as what it is: a note on the job naming the tests
whose first run costs far more than their warm runs (``first_call_note``).
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

PLUGIN = "lagtrace_warm"
HOOK_DIR = "warm-hook"
ENV = "LAGTRACE_FIRST_RUNS"
OUTPUT_PREFIX = "first-runs"
# How many times each test runs in a warmed process: the prediction of a focused round's
# cost (services/measure/screen.py within_budget) counts them.
RUNS_PER_TEST = 2
# The tests a note names (the costliest first); the rest are counted.
NAMED = 5

SOURCE = '''"""lagtrace: each selected test runs twice in this process; the first (cold) run is
written to LAGTRACE_FIRST_RUNS, the second (warm) run is the one reported."""

import json
import os

import pytest
from _pytest.runner import runtestprotocol

_out = None


def _write(nodeid, seconds, outcome):
    global _out
    if _out is None:
        _out = open("%s.%d.jsonl" % (os.environ["LAGTRACE_FIRST_RUNS"], os.getpid()), "a")
    _out.write(json.dumps({"test": nodeid, "seconds": seconds, "outcome": outcome}) + "\\n")
    _out.flush()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    # The cold run keeps the module's and the session's fixtures (its next item is
    # itself); the warm run tears down as the suite's order wants.
    cold = runtestprotocol(item, nextitem=item, log=False)
    warm = runtestprotocol(item, nextitem=nextitem, log=False)
    cold_passed = all(report.passed for report in cold)
    reports = warm if cold_passed and not any(report.failed for report in warm) else cold
    _write(
        item.nodeid,
        sum(getattr(report, "duration", 0.0) for report in cold),
        "passed" if cold_passed else "not passed",
    )
    for report in reports:
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True
'''


def warmed(
    command: list[str], env: dict[str, str], run_dir: Path, visible_dir: str, visible_out: str
) -> tuple[list[str], dict[str, str]]:
    """The narrowed pytest command and its environment with the plugin loaded;
    ``visible_dir`` and ``visible_out`` are run_dir's hook directory and output prefix as
    the command sees them."""
    hook_dir = run_dir / HOOK_DIR
    hook_dir.mkdir(exist_ok=True)
    (hook_dir / f"{PLUGIN}.py").write_text(SOURCE)
    behind = env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    python_path = visible_dir + (os.pathsep + behind if behind else "")
    return [*command, "-p", PLUGIN], {**env, "PYTHONPATH": python_path, ENV: visible_out}


def first_runs(run_dir: Path) -> dict[str, float]:
    """Node id -> the duration of its cold run that passed, from every process of the run
    (xdist workers write a file each)."""
    found: dict[str, float] = {}
    for path in sorted(run_dir.glob(f"{OUTPUT_PREFIX}.*.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue  # a process killed while writing
            if entry.get("outcome") == "passed" and isinstance(entry.get("seconds"), int | float):
                found[str(entry["test"])] = float(entry["seconds"])
    return found


def _s(seconds: float) -> str:
    return f"{seconds:.3f} s"


def first_call_note(
    cold: dict[str, list[float]], warm: dict[str, list[float]], min_extra_s: float, min_ratio: float
) -> str | None:
    """The job's note on one-time costs: the tests whose median cold run is at least
    ``min_ratio`` times their median warm run and ``min_extra_s`` longer; None if none is."""
    costly = []
    for test_id, firsts in cold.items():
        timed = warm.get(test_id)
        if not firsts or not timed:
            continue
        first, usual = statistics.median(firsts), statistics.median(timed)
        if first - usual >= min_extra_s and first >= min_ratio * usual:
            costly.append((first - usual, test_id, first, usual, len(firsts)))
    if not costly:
        return None
    costly.sort(reverse=True)
    named = "; ".join(
        f"{test_id} {_s(first)} on its first run against {_s(usual)} warm (median of {runs})"
        for _, test_id, first, usual, runs in costly[:NAMED]
    )
    more = f"; and {len(costly) - NAMED} more" if len(costly) > NAMED else ""
    return (
        "first-call cost, not latency: each focused process ran every test once before timing it, and "
        f"{len(costly)} test(s) paid one-time work on that first run (imports, assertion rewriting, caches, "
        f"session fixtures): {named}{more}. The timed runs are the warm ones"
    )
