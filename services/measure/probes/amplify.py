"""Short tests amplified for the drill (docs/explanations/evidence.md): the drilled test run again and again in
one pytest process, so that the tracers see the test rather than pytest's start-up.

A 15 ms test's evidence run is mostly pytest starting: py-spy takes one or two samples of
the test at 100 Hz, strace counts the imports' syscalls, and the stall snapshot lands in
collection. A small pytest plugin (loaded with ``-p``, from a directory lagtrace puts
first on PYTHONPATH) runs the selected test ``iterations`` times inside one
``pytest_runtest_protocol``: the silent repetitions keep its module and session fixtures
(the next item is itself), only the last one is reported (JUnit, terminal), and the
stall clock's test start and end (services/measure/probes/stall.py) frame them all. A
repetition that fails ends the loop early: a test that cannot be repeated is traced as
it is. Evidence counts then cover every repetition; the rules divide by ``iterations``
(EvidenceRunTiming.iterations) where they compare a count with one run of the test.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

PLUGIN = "lagtrace_amplify"
HOOK_DIR = "amplify-hook"
ENV = "LAGTRACE_AMPLIFY"
# A test is repeated until its repetitions take about this long (at its timing median in
# the configuration drilled) ...
TARGET_S = 1.0
# ... at most this many times: a 1 ms test repeated 1,000 times would mostly measure the
# plugin's own loop.
MAX_ITERATIONS = 50
# py-spy's profile is compared between two configurations function by function (hot_path's
# differential), and at 100 Hz one second holds 100 samples: a function's share of them
# moved by more than the slowdown between two runs of one starlette test (docs/measurements/accuracy.md: the
# named frame went from the test client's to a middleware's). Three seconds, and up to 200
# repetitions, since a profile's sampler does not slow the loop it samples.
PROFILE_TARGET_S = 3.0
PROFILE_MAX_ITERATIONS = 200

SOURCE = '''"""lagtrace: the selected test, run LAGTRACE_AMPLIFY times in this process (only the
last run reported), so that lagtrace's tracers see the test rather than pytest starting."""

import os

import pytest
from _pytest.runner import runtestprotocol


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    times = int(os.environ.get("LAGTRACE_AMPLIFY", "1"))
    if times <= 1:
        return None
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for _ in range(times - 1):
        reports = runtestprotocol(item, nextitem=item, log=False)
        if any(report.failed for report in reports):
            break
    runtestprotocol(item, nextitem=nextitem, log=True)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True
'''


def iterations(median_s: float, target_s: float = TARGET_S, most: int = MAX_ITERATIONS) -> int:
    """How many times a test of this timing median runs in its evidence runs."""
    if median_s <= 0:
        return most
    return max(1, min(most, math.ceil(target_s / median_s)))


def amplified(
    command: list[str], env: dict[str, str], run_dir: Path, visible_dir: str, times: int
) -> tuple[list[str], dict[str, str]]:
    """The narrowed pytest command and the probe's environment, with the plugin loaded and
    told to run the test ``times`` times; ``visible_dir`` is run_dir's hook directory as
    the command sees it."""
    hook_dir = run_dir / HOOK_DIR
    hook_dir.mkdir(exist_ok=True)
    (hook_dir / f"{PLUGIN}.py").write_text(SOURCE)
    behind = env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    python_path = visible_dir + (os.pathsep + behind if behind else "")
    return [*command, "-p", PLUGIN], {**env, "PYTHONPATH": python_path, ENV: str(times)}
