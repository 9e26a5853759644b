import subprocess
import sys

from services.measure import pytest_command as junit


def test_pytest_commands_are_recognised():
    assert junit.is_pytest(["pytest", "-q"])
    assert junit.is_pytest(["/usr/bin/py.test"])
    assert junit.is_pytest(["python3", "-m", "pytest", "tests"])
    assert junit.is_pytest([sys.executable, "-m", "pytest"])
    assert not junit.is_pytest(["python3", "prog.py"])
    assert not junit.is_pytest(["python3", "-m", "unittest"])
    assert not junit.is_pytest([])


def test_real_pytest_junit_gives_node_ids_durations_and_outcomes(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "pytest.ini").write_text("[pytest]\n")
    (suite / "test_mixed.py").write_text(
        "import time, pytest\n"
        "def test_sleeps():\n    time.sleep(0.1)\n"
        "def test_fails():\n    assert False\n"
        "def test_skipped():\n    pytest.skip('a test of the program under test, skipped at run time')\n"
        "class TestGroup:\n    @pytest.mark.parametrize('n', [1, 2])\n    def test_param(self, n):\n        assert n\n"
    )
    xml = tmp_path / "out.xml"
    command = junit.with_junit([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], str(xml))
    subprocess.run(command, cwd=suite, capture_output=True)
    cases = {case.test_id: case for case in junit.parse(xml)}
    assert set(cases) == {
        "test_mixed.py::test_sleeps",
        "test_mixed.py::test_fails",
        "test_mixed.py::test_skipped",
        "test_mixed.py::TestGroup::test_param[1]",
        "test_mixed.py::TestGroup::test_param[2]",
    }
    assert cases["test_mixed.py::test_sleeps"].duration_s >= 0.1
    assert cases["test_mixed.py::test_sleeps"].outcome == "passed"
    assert cases["test_mixed.py::test_fails"].outcome == "failed"
    assert cases["test_mixed.py::test_skipped"].outcome == "skipped"


def test_missing_or_empty_junit_means_no_cases(tmp_path):
    assert junit.parse(tmp_path / "absent.xml") == []
    (tmp_path / "empty.xml").write_text("")
    assert junit.parse(tmp_path / "empty.xml") == []
