"""Per-test durations: make a pytest command write JUnit XML, then read it back."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from junitparser import Error, Failure, JUnitXml, Skipped

JUNIT_FILE = "junit.xml"
# pytest writes each case's time as f"{duration:.3f}" (_pytest/junitxml.py): durations
# are known to the millisecond, no better (tests/unit/test_junit_resolution.py checks).
JUNIT_RESOLUTION_S = 0.001
# pytest's exit status when the suite ran and some tests failed (ExitCode.TESTS_FAILED).
PYTEST_TESTS_FAILED = 1


@dataclass(frozen=True)
class TestCase:
    __test__ = False  # not a pytest test class

    test_id: str  # pytest's node id where it can be rebuilt: tests/test_x.py::TestY::test_z
    duration_s: float
    outcome: str  # passed, failed, error, skipped


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


def parse(path: Path) -> list[TestCase]:
    if not path.exists() or path.stat().st_size == 0:
        return []
    xml = JUnitXml.fromfile(str(path))
    suites = [xml] if xml._tag == "testsuite" else list(xml)
    cases: list[TestCase] = []
    for suite in suites:
        for case in suite:
            cases.append(TestCase(_node_id(case), float(case.time or 0.0), _outcome(case)))
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


def _outcome(case) -> str:
    for result in case.result:
        if isinstance(result, Skipped):
            return "skipped"
        if isinstance(result, Failure):
            return "failed"
        if isinstance(result, Error):
            return "error"
    return "passed"
