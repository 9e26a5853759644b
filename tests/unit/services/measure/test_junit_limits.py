"""The JUnit XML a run's pytest writes is read as hostile input: streamed, without a
DOCTYPE, within a size, a number of cases and a test id length; a real report reads as
junitparser read it (services/measure/pytest_command.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from services.measure import pytest_command
from services.measure.pytest_command import CollectionError, TestCase

DATA = Path(__file__).parents[2] / "data"

SUITE = """\
import pytest

def test_passes(record_property):
    record_property("lagtrace_iterations", 7)

def test_fails():
    assert False

def test_skipped():
    pytest.skip("skipped at run time")

@pytest.fixture
def broken():
    raise RuntimeError("fixture")

def test_errors(broken):
    pass

class TestGroup:
    @pytest.mark.parametrize("n", [1, 2])
    def test_param(self, n):
        assert n
"""


def junitparser_read(path: Path) -> tuple[list[TestCase], list[CollectionError]]:
    """parse and collection_errors as they were on junitparser's whole tree."""
    junitparser = pytest.importorskip("junitparser")

    def collection_failure(case):
        for result in case.result:
            if isinstance(result, junitparser.Error) and result.message == pytest_command.COLLECTION_FAILURE:
                return result
        return None

    def outcome(case):
        for result in case.result:
            if isinstance(result, junitparser.Skipped):
                return "skipped"
            if isinstance(result, junitparser.Failure):
                return "failed"
            if isinstance(result, junitparser.Error):
                return "error"
        return "passed"

    def node_id(case):
        classname, file = case.classname or "", case._elem.get("file")
        if file:
            module = file[:-3].replace("/", ".") if file.endswith(".py") else file
            rest = classname[len(module) :].lstrip(".") if classname.startswith(module) else ""
            return "::".join([file, *(rest.split(".") if rest else []), case.name])
        return f"{classname}::{case.name}" if classname else case.name

    def iterations(case):
        prop = case._elem.find("properties/property[@name='lagtrace_iterations']")
        value = prop.get("value", "") if prop is not None else ""
        return int(value) if value.isdigit() else None

    def line(case):
        found = case._elem.get("line")
        return int(found) + 1 if found is not None and found.isdigit() else None

    xml = junitparser.JUnitXml.fromfile(str(path))
    cases = [case for suite in xml for case in suite]
    parsed = [
        TestCase(node_id(c), float(c.time or 0.0), outcome(c), line(c), iterations(c))
        for c in cases
        if collection_failure(c) is None
    ]
    errors = [
        CollectionError(c._elem.get("file") or c.name or "?", pytest_command._exception_line(error.text or ""))
        for c in cases
        if (error := collection_failure(c)) is not None
    ]
    return parsed, errors


def read(path: Path) -> tuple[list[TestCase], list[CollectionError]]:
    return pytest_command.parse(path), pytest_command.collection_errors(path)


def junit(*cases: str) -> str:
    return '<testsuites><testsuite name="pytest">' + "".join(cases) + "</testsuite></testsuites>"


def case(name: str, classname: str = "tests.test_x", file: str = "tests/test_x.py") -> str:
    return f'<testcase classname="{classname}" name="{name}" file="{file}" line="3" time="0.012" />'


def test_a_real_pytest_report_reads_as_junitparser_read_it(tmp_path):
    (tmp_path / "test_mixed.py").write_text(SUITE)
    (tmp_path / "test_broken.py").write_text("import nonexistent_module\n")
    out = tmp_path / "junit.xml"
    command = pytest_command.with_junit(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--continue-on-collection-errors"], str(out)
    )
    subprocess.run(command, cwd=tmp_path, capture_output=True, timeout=120)
    cases, errors = read(out)
    assert (cases, errors) == junitparser_read(out)
    assert {c.test_id: c.outcome for c in cases} == {
        "test_mixed.py::test_passes": "passed",
        "test_mixed.py::test_fails": "failed",
        "test_mixed.py::test_skipped": "skipped",
        "test_mixed.py::test_errors": "error",
        "test_mixed.py::TestGroup::test_param[1]": "passed",
        "test_mixed.py::TestGroup::test_param[2]": "passed",
    }
    assert [c.iterations for c in cases if c.test_id.endswith("test_passes")] == [7]
    assert all(c.line and c.duration_s >= 0 for c in cases)
    assert errors == [CollectionError("test_broken.py", "ModuleNotFoundError: No module named 'nonexistent_module'")]


@pytest.mark.parametrize("name", ["junit-xunit1.xml", "junit-collection-errors.xml"])
def test_the_recorded_reports_read_as_junitparser_read_them(name):
    assert read(DATA / name) == junitparser_read(DATA / name)


def test_odd_but_well_formed_reports_read_as_junitparser_read_them(tmp_path):
    out = tmp_path / "junit.xml"
    out.write_text(
        '<testsuite name="root">'  # a testsuite as root
        '<testcase classname="a.B" name="t1" time="1,234.5"><skipped/><failure message="m"/></testcase>'
        '<testcase name="t2"><system-out><error message="collection failure">E   Boom<x/>after</error></system-out>'
        '<properties><property name="lagtrace_iterations" value="3"/></properties></testcase>'
        '<testcase name="t3"><error message="other"/><error message="collection failure">text only</error></testcase>'
        '<testcase name="t4"><x><properties><property name="lagtrace_iterations" value="9"/></properties></x></testcase>'
        '<testsuite name="nested"><testcase name="t5" line="x"/></testsuite>'
        '<other><testcase name="not a case"/></other>'
        "</testsuite>"
    )
    assert read(out) == junitparser_read(out)
    assert [c.test_id for c in pytest_command.parse(out)] == ["a.B::t1", "t4", "t5"]


def billion_laughs() -> str:
    entities = '<!ENTITY lol0 "lollollollollollollollollollol">' + "".join(
        f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, 10)
    )
    return f'<?xml version="1.0"?><!DOCTYPE testsuites [{entities}]>' + junit(case("&lol9;"))


@pytest.mark.parametrize(
    "document",
    [
        billion_laughs().encode(),
        # A harmless entity is refused too: no DOCTYPE at all is read.
        ('<!DOCTYPE testsuites [<!ENTITY x "y">]>' + junit(case("&x;"))).encode(),
        ('<!DOCTYPE testsuites [<!ENTITY x SYSTEM "file:///etc/hostname">]>' + junit(case("&x;"))).encode(),
        # Told by the parser, not by looking for the bytes "<!DOCTYPE": UTF-16 hides them.
        ('<?xml version="1.0" encoding="utf-16"?><!DOCTYPE testsuites [<!ENTITY x "y">]>' + junit(case("&x;"))).encode(
            "utf-16"
        ),
    ],
    ids=["billion-laughs", "internal-entity", "external-entity", "utf-16"],
)
def test_a_report_with_a_doctype_is_refused_without_expanding_it(tmp_path, caplog, document):
    out = tmp_path / "junit.xml"
    out.write_bytes(document)
    started = time.perf_counter()
    assert read(out) == ([], [])
    assert time.perf_counter() - started < 1.0  # the entities' 3 GB are never built
    assert "DOCTYPE" in caplog.text


def test_a_report_over_the_size_cap_is_not_parsed(tmp_path, monkeypatch, caplog):
    out = tmp_path / "junit.xml"
    out.write_text(junit(case("test_a")))
    size = out.stat().st_size
    monkeypatch.setattr(pytest_command, "JUNIT_MAX_BYTES", size)
    assert [c.test_id for c in pytest_command.parse(out)] == ["tests/test_x.py::test_a"]
    monkeypatch.setattr(pytest_command, "JUNIT_MAX_BYTES", size - 1)

    def no_parser(*args, **kwargs):
        raise AssertionError("a report over the cap was parsed")

    monkeypatch.setattr(ET, "XMLParser", no_parser)
    assert read(out) == ([], [])
    assert f"{size} bytes, over the {size - 1} read" in caplog.text


def test_a_test_id_is_cut_to_the_cap_and_long_ids_stay_distinct(tmp_path):
    long = "test_" + "x" * 5000
    out = tmp_path / "junit.xml"
    out.write_text(junit(case(long + "_a"), case(long + "_b"), case("é" * 5000), case("test_short")))
    ids = [c.test_id for c in pytest_command.parse(out)]
    assert all(len(test_id.encode()) <= pytest_command.TEST_ID_MAX_BYTES for test_id in ids)
    assert ids[0] != ids[1]
    assert ids[0].startswith("tests/test_x.py::test_xxx") and ids[1].startswith("tests/test_x.py::test_xxx")
    assert ids[2].startswith("tests/test_x.py::ééé")  # cut between characters, not inside one
    assert ids[3] == "tests/test_x.py::test_short"
    assert [c.test_id for c in pytest_command.parse(out)] == ids  # the same id on every read


def test_cases_beyond_the_cap_are_dropped(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(pytest_command, "JUNIT_MAX_CASES", 3)
    out = tmp_path / "junit.xml"
    out.write_text(junit(*(case(f"test_{n}") for n in range(3))))
    assert len(pytest_command.parse(out)) == 3
    assert not caplog.text  # as many as the cap: nothing is dropped
    out.write_text(junit(*(case(f"test_{n}") for n in range(10))))
    assert [c.test_id for c in pytest_command.parse(out)] == [f"tests/test_x.py::test_{n}" for n in range(3)]
    assert "only its first 3 test cases are read" in caplog.text


@pytest.mark.parametrize(
    "document",
    [
        junit(case("test_a"))[:-20],  # cut short
        "not xml at all",
        '<?xml version="1.0" encoding="no-such-codec"?><testsuites/>',
        '<?xml version="1.0" encoding="utf-7"?><testsuites/>',
    ],
    ids=["truncated", "text", "unknown-encoding", "multibyte-encoding"],
)
def test_a_malformed_report_is_no_test_case(tmp_path, caplog, document):
    out = tmp_path / "junit.xml"
    out.write_text(document)
    assert read(out) == ([], [])
    assert "not read, as if no test ran" in caplog.text


def test_a_link_or_a_fifo_is_not_read(tmp_path):
    real = tmp_path / "real.xml"
    real.write_text(junit(case("test_a")))
    (tmp_path / "link.xml").symlink_to(real)
    os.mkfifo(tmp_path / "fifo.xml")  # opened for reading, it would wait for a writer forever
    assert read(tmp_path / "link.xml") == ([], [])
    assert read(tmp_path / "fifo.xml") == ([], [])
    assert len(pytest_command.parse(real)) == 1


@pytest.mark.parametrize(
    ("time", "duration"),
    [
        ("0.250", 0.25),
        ("1,234.5", 1234.5),  # as junitparser read it
        ("", 0.0),
        ("abc", 0.0),
        ("nan", 0.0),
        ("NaN", 0.0),
        ("inf", 0.0),
        ("-inf", 0.0),
        ("1e999", 0.0),  # inf once read
        ("-0.5", 0.0),
    ],
)
def test_a_time_that_is_no_duration_reads_as_zero_without_failing_the_run(tmp_path, time, duration):
    # The job's code writes the file: a time that is no number used to raise ValueError
    # out of parse (and the job failed), and nan, inf or a negative time became a duration.
    out = tmp_path / "junit.xml"
    out.write_text(junit(f'<testcase classname="tests.test_x" name="test_a" file="tests/test_x.py" time="{time}"/>'))
    assert [c.duration_s for c in pytest_command.parse(out)] == [duration]


@pytest.mark.parametrize(
    ("value", "read"),
    [
        ("3", 3),
        ("²", None),  # str.isdigit() takes it, int() refuses it
        ("١٢", None),  # Arabic-Indic digits: int() reads them, but pytest writes ASCII
        ("9" * 5000, None),  # over int()'s digit limit
        ("2147483648", None),  # over test_results.line's 32-bit column
        ("-1", None),
        ("", None),
    ],
)
def test_a_line_or_an_iteration_count_is_read_in_ascii_digits_only(tmp_path, value, read):
    out = tmp_path / "junit.xml"
    out.write_text(
        junit(
            f'<testcase classname="tests.test_x" name="test_a" file="tests/test_x.py" line="{value}" time="0.1">'
            f'<properties><property name="lagtrace_iterations" value="{value}"/></properties></testcase>'
        ),
        encoding="utf-8",
    )
    [found] = pytest_command.parse(out)
    assert found.iterations == read
    assert found.line == (read + 1 if read is not None else None)
