"""How many processes a pytest command runs its tests in: pytest-xdist's workers, read
from the command, PYTEST_ADDOPTS and the configuration file's addopts when a run is taken
(services/measure/runs.py), while the checkout is there. The sum of a run's test
durations is held against its wall time that many times over
(services/diagnose/timing_disagrees.py)."""

from __future__ import annotations

import shlex
from pathlib import Path

from services.measure.pytest_command import _PATH_OPTIONS, _arguments, config_addopts

# pytest-xdist's options that set how many workers run the tests
# (https://pytest-xdist.readthedocs.io/en/stable/distribution.html).
_WORKER_OPTIONS = ("-n", "--numprocesses")
_TX_OPTION = "--tx"
# `-n auto` and `-n logical` count the CPUs; pytest-xdist reads this variable first.
XDIST_AUTO_ENV = "PYTEST_XDIST_AUTO_NUM_WORKERS"
# Options of pytest (and of its common plugins) whose value is the next argument, beside
# _PATH_OPTIONS: that value is never read as an option ("-k -n" selects tests named "-n").
_VALUE_OPTIONS = {*_PATH_OPTIONS, "--maxfail", "--durations", "--durations-min", "-W", "--pythonwarnings", "-r"}


def xdist_workers(
    command: list[str],
    workdir: Path,
    ceiling: Path | None = None,
    env: dict[str, str] | None = None,
    cpus: int = 1,
) -> int | None:
    """How many processes run the pytest command's tests at once: pytest-xdist's workers
    (``-n N``, ``--numprocesses``, ``--tx N*popen``), as the configuration file's addopts,
    PYTEST_ADDOPTS in ``env`` and the command give them, the last one standing as in
    pytest; 1 without them, or with ``-p no:xdist``. ``-n auto`` counts ``cpus`` (the
    most the machine has), or PYTEST_XDIST_AUTO_NUM_WORKERS where it is set. None where
    it cannot be told (an argument it cannot read): no number is then held against the
    run's wall time (services/diagnose/timing_disagrees.py). Reads files only, as rootdir."""
    env = env or {}
    try:
        addopts = [*config_addopts(command, workdir, ceiling), *shlex.split(env.get("PYTEST_ADDOPTS", ""))]
    except (ValueError, OSError):  # an unbalanced quote, a file that cannot be read
        return None
    arguments = [*addopts, *_arguments(command)]
    workers: int | None = 1
    tx = 0
    previous = ""
    for argument in arguments:
        option, eq, inline = argument.partition("=")
        if previous in (*_WORKER_OPTIONS, _TX_OPTION):
            option, value = previous, argument
        elif previous in _VALUE_OPTIONS:
            if previous == "-p" and argument == "no:xdist":
                return 1
            previous = ""
            continue
        elif option in (*_WORKER_OPTIONS, _TX_OPTION):
            if not eq:
                previous = option
                continue
            value = inline
        elif argument.startswith("-n"):
            option, value = "-n", argument[2:]
        elif argument == "-pno:xdist":
            return 1
        elif _bundles_n(argument):
            return None  # "-qn4": flags bundled with -n, not read here
        else:
            previous = argument
            continue
        previous = ""
        if option == _TX_OPTION:
            count, star, _ = value.partition("*")
            tx += int(count) if star and count.isascii() and count.isdigit() else 1
        elif value in ("auto", "logical"):
            auto = env.get(XDIST_AUTO_ENV, "")
            workers = max(cpus, int(auto) if auto.isascii() and auto.isdigit() else 1)
        elif value.isascii() and value.isdigit() and len(value) < 7:
            workers = max(int(value), 1)
        else:
            workers = None
    if workers is None:
        return None
    return max(workers, tx) if tx else workers


# pytest's short options that take no value: only these can come before an -n bundled
# with them ("-qn4").
_SHORT_FLAGS = set("qvxslhV")


def _bundles_n(argument: str) -> bool:
    body = argument[1:] if argument.startswith("-") and not argument.startswith("--") else ""
    flags = body[: max(body.find("n"), 0)]
    return bool(flags) and set(flags) <= _SHORT_FLAGS
