"""Short tests amplified for the drill (docs/explanations/evidence.md): the drilled test run again and again in
one pytest process, so that the tracers see the test rather than pytest's start-up.

A 15 ms test's evidence run is mostly pytest starting: py-spy takes one or two samples of
the test at 100 Hz, strace counts the imports' syscalls, and the stall snapshot lands in
collection. A small pytest plugin (loaded with ``-p``, from a directory lagtrace puts
first on PYTHONPATH) runs the selected test ``iterations`` times inside one
``pytest_runtest_protocol``: the silent repetitions keep its module, class and session
fixtures and set its function-scoped ones up again, only the last one is reported (JUnit, terminal), and the
stall clock's test start and end (services/measure/probes/stall.py) frame them all. A
repetition that fails ends the loop early: a test that cannot be repeated is traced as
it is. The loop also ends once its repetitions have taken the target time *under the
probe*: strace slows a test of 30,000 one-byte reads 16x, so the count planned from its
untraced median (24 runs, 18 s of tracing) would fill the target many times over; two
runs fill it. The last run's JUnit case carries the count that ran (a ``lagtrace_iterations``
property, xunit1), evidence counts cover every repetition, and the rules divide by
``iterations`` (EvidenceRunTiming.iterations) where they compare a count with one run of the
test.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

PLUGIN = "lagtrace_amplify"
HOOK_DIR = "amplify-hook"
ENV = "LAGTRACE_AMPLIFY"
TARGET_ENV = "LAGTRACE_AMPLIFY_S"
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
import time

import pytest
from _pytest.runner import runtestprotocol


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    times = int(os.environ.get("LAGTRACE_AMPLIFY", "1"))
    if times <= 1:
        return None
    target_s = float(os.environ.get("LAGTRACE_AMPLIFY_S", "inf"))
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    ran, started = 1, time.monotonic()
    while ran < times and time.monotonic() - started < target_s:
        # Torn down to its parent: its function-scoped fixtures end and are set up again
        # for the next run (with nextitem=item pytest leaves the item set up and skips its
        # setup, so a test with any fixture failed from its second run on), while module,
        # class and session fixtures stay.
        reports = runtestprotocol(item, nextitem=item.parent, log=False)
        ran += 1
        if any(report.failed for report in reports):
            break
    # pytest_command.ITERATIONS_PROPERTY: JUnit (xunit1) writes it on the reported case.
    item.user_properties.append(("lagtrace_iterations", ran))
    runtestprotocol(item, nextitem=nextitem, log=True)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True
'''


def ran(reported: int | None, planned: int) -> int:
    """How many times the test ran: the count its JUnit case reported, within 1..planned
    (the job's output is not trusted beyond the bounds the host set), else as planned."""
    if reported is None:
        return planned
    return max(1, min(planned, reported))


def iterations(median_s: float, target_s: float = TARGET_S, most: int = MAX_ITERATIONS) -> int:
    """How many times a test of this timing median runs in its evidence runs."""
    if median_s <= 0:
        return most
    return max(1, min(most, math.ceil(target_s / median_s)))


def amplified(
    command: list[str], env: dict[str, str], run_dir: Path, visible_dir: str, times: int, target_s: float
) -> tuple[list[str], dict[str, str]]:
    """The narrowed pytest command and the probe's environment, with the plugin loaded and
    told to run the test at most ``times`` times, and no more once its runs have taken
    ``target_s``; ``visible_dir`` is run_dir's hook directory as the command sees it."""
    hook_dir = run_dir / HOOK_DIR
    hook_dir.mkdir(exist_ok=True)
    (hook_dir / f"{PLUGIN}.py").write_text(SOURCE)
    behind = env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    python_path = visible_dir + (os.pathsep + behind if behind else "")
    return [*command, "-p", PLUGIN], {
        **env,
        "PYTHONPATH": python_path,
        ENV: str(times),
        TARGET_ENV: f"{target_s:g}",
    }
