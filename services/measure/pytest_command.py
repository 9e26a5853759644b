"""Everything lagtrace knows about pytest: spotting a pytest command, making it write
JUnit XML and reading the per-test durations back, node ids, narrowing to one test."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from junitparser import Error, Failure, JUnitXml, Skipped

JUNIT_FILE = "junit.xml"
# pytest writes each case's time as f"{duration:.3f}" (_pytest/junitxml.py): durations
# are known to the millisecond, no better (tests/unit/test_junit_resolution.py checks).
JUNIT_RESOLUTION_S = 0.001
# pytest's exit status when the suite ran and some tests failed (ExitCode.TESTS_FAILED).
PYTEST_TESTS_FAILED = 1

# pytest options whose value is a path: the value must stay when the command's own test
# paths are swapped for one node id.
_PATH_OPTIONS = {
    "-c",
    "--rootdir",
    "--confcutdir",
    "--basetemp",
    "--ignore",
    "--ignore-glob",
    "--deselect",
    "-p",
    "--junitxml",
    "--junit-xml",
    "--log-file",
    "--cov",
    "--cov-config",
    "-o",
    "--override-ini",
    "--import-mode",
    "-k",
    "-m",
}


@dataclass(frozen=True)
class TestCase:
    __test__ = False  # not a pytest test class

    test_id: str  # pytest's node id where it can be rebuilt: tests/test_x.py::TestY::test_z
    duration_s: float
    outcome: str  # passed, failed, error, skipped
    line: int | None = None  # 1-based line of its definition (xunit1's 0-based line attribute + 1)


def is_pytest(command: list[str]) -> bool:
    """`pytest ...`, `py.test ...` or `python -m pytest ...` (any python)."""
    if not command:
        return False
    program = os.path.basename(command[0])
    if program in ("pytest", "py.test"):
        return True
    return program.startswith("python") and command[1:3] == ["-m", "pytest"]


def with_junit(command: list[str], junit_path: str) -> list[str]:
    """The user's pytest command, also writing JUnit XML (the user edits nothing).

    xunit1 adds each case's file, which turns JUnit's dotted classname back into the
    pytest node id that a rerun of one test needs.
    """
    return [*command, f"--junitxml={junit_path}", "-o", "junit_family=xunit1"]


def narrow_to_test(
    command: list[str], node_id: str, workdir: Path | None, is_test_path: Callable[[str], bool] | None = None
) -> list[str]:
    """The pytest command with its test paths replaced by one node id.

    pytest runs the union of its positional paths, so appending the node id alone would
    still run everything: existing paths among the arguments (not values of path
    options) are dropped first. Without a checkout (``workdir`` None: a rerun is planned
    before its code is fetched) paths are told apart by name: the node's own file, a
    directory holding it, or any other test module; ``is_test_path`` overrides both.
    """
    if is_test_path is None:
        is_test_path = _exists_in(workdir) if workdir is not None else _named_like_a_test_path(node_id)
    kept: list[str] = []
    previous = ""
    for argument in command:
        is_value = previous in _PATH_OPTIONS
        path_part = argument.split("::", 1)[0]
        if kept and not argument.startswith("-") and not is_value and is_test_path(path_part):
            previous = argument
            continue
        kept.append(argument)
        previous = argument
    return [*kept, node_id]


def _exists_in(workdir: Path) -> Callable[[str], bool]:
    return lambda path: (workdir / path).exists()


def _named_like_a_test_path(node_id: str) -> Callable[[str], bool]:
    node_path = node_id.split("::", 1)[0]
    return lambda path: (
        path.endswith(".py") or path.rstrip("/") in (".", "") or node_path.startswith(path.rstrip("/") + "/")
    )


def parse(path: Path) -> list[TestCase]:
    if not path.exists() or path.stat().st_size == 0:
        return []
    xml = JUnitXml.fromfile(str(path))
    suites = [xml] if xml._tag == "testsuite" else list(xml)
    cases: list[TestCase] = []
    for suite in suites:
        for case in suite:
            cases.append(TestCase(_node_id(case), float(case.time or 0.0), _outcome(case), _line(case)))
    return cases


def _node_id(case) -> str:
    classname = case.classname or ""
    file = case._elem.get("file")
    if file:
        module = file[:-3].replace("/", ".") if file.endswith(".py") else file
        rest = classname[len(module) :].lstrip(".") if classname.startswith(module) else ""
        classes = rest.split(".") if rest else []
        return "::".join([file, *classes, case.name])
    return f"{classname}::{case.name}" if classname else case.name


def _line(case) -> int | None:
    line = case._elem.get("line")
    return int(line) + 1 if line is not None and line.isdigit() else None


def _outcome(case) -> str:
    for result in case.result:
        if isinstance(result, Skipped):
            return "skipped"
        if isinstance(result, Failure):
            return "failed"
        if isinstance(result, Error):
            return "error"
    return "passed"
