import subprocess
import sys

import pytest

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


SUITE = "def test_a():\n    pass\n\n\nclass TestB:\n    def test_c(self):\n        pass\n"
CONFIGS = {
    "pytest.ini": "[pytest]\n",
    "pyproject.toml": "[tool.pytest.ini_options]\naddopts = '-q'\n",
    "tox.ini": "[tox]\nenvlist = py\n\n[pytest]\n",
    "setup.cfg": "[metadata]\nname = x\n\n[tool:pytest]\n",
    "setup.py": "",
}


def _junit_ids(command: list[str], cwd, xml) -> tuple[int, list[str]]:
    done = subprocess.run(junit.with_junit(command, str(xml)), cwd=cwd, capture_output=True, text=True)
    return done.returncode, [case.test_id for case in junit.parse(xml)]


@pytest.mark.parametrize("config", list(CONFIGS))
def test_narrowed_node_ids_run_when_pytest_s_rootdir_is_a_subfolder(config, tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / "service" / "tests").mkdir(parents=True)
    (checkout / "service" / config).write_text(CONFIGS[config])
    (checkout / "service" / "tests" / "test_suite.py").write_text(SUITE)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "service/tests"]
    code, ids = _junit_ids(command, checkout, tmp_path / "all.xml")
    assert code == 0 and ids == ["tests/test_suite.py::test_a", "tests/test_suite.py::TestB::test_c"]
    assert junit.rootdir(command, checkout) == (checkout / "service").resolve()
    for test_id in ids:
        # With the checkout (the drill) and without it ("Rerun this test", planned before
        # its code is fetched).
        for workdir in (checkout, None):
            narrowed = junit.narrow_to_test(command, test_id, workdir)
            code, ran = _junit_ids(narrowed, checkout, tmp_path / "one.xml")
            # Before: the rootdir-relative id was given from the checkout: exit 4, nothing ran.
            assert (code, ran) == (0, [test_id]), narrowed
            assert junit.nothing_ran(code, test_id) is None
    # The focused screen: several node ids in one run, in the order given.
    narrowed = junit.narrow_to_tests(command, list(reversed(ids)), checkout)
    assert _junit_ids(narrowed, checkout, tmp_path / "some.xml") == (0, list(reversed(ids)))


@pytest.mark.parametrize("config", ["pytest.ini", "pyproject.toml"])
def test_a_suite_in_a_subfolder_of_a_configured_repository_narrows_on_the_host(config, tmp_path):
    # `lagtrace run` in a monorepo's package folder: pytest's rootdir is the repository
    # above it, whose ids the survey reads; the focused rerun runs in the package folder.
    repository = tmp_path / "repository"
    package = repository / "packages" / "api"
    package.mkdir(parents=True)
    (repository / config).write_text(CONFIGS[config])
    (package / "test_suite.py").write_text(SUITE)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_suite.py"]
    code, ids = _junit_ids(command, package, tmp_path / "all.xml")
    assert code == 0 and ids == ["packages/api/test_suite.py::test_a", "packages/api/test_suite.py::TestB::test_c"]
    ceiling = junit.search_ceiling("local")
    assert junit.rootdir(command, package, ceiling) == repository.resolve()
    # Before: the repository-relative ids were given from the package folder and ran nothing.
    narrowed = junit.narrow_to_tests(command, ids[1:], package, ceiling)
    assert _junit_ids(narrowed, package, tmp_path / "some.xml") == (0, ids[1:])
    code, ran = _junit_ids(junit.narrow_to_test(command, ids[0], package, ceiling=ceiling), package, tmp_path / "o.xml")
    assert (code, ran) == (0, ids[:1])
    # In a container only the working directory is mounted: nothing above it counts.
    assert junit.search_ceiling("docker") is None
    assert junit.rootdir(command, package, junit.search_ceiling("docker")) == package.resolve()


def test_without_a_config_file_the_rootdir_is_the_working_directory(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_suite.py").write_text(SUITE)
    (tmp_path / "tests" / "pyproject.toml").write_text("[project]\nname = 'x'\n")  # no pytest section: ignored
    (tmp_path / "tox.ini").write_text("[tox]\n")  # no [pytest] section
    command = ["pytest", "-q", "tests"]
    assert junit.rootdir(command, tmp_path) == (tmp_path / "tests").resolve()  # pytest's fallback to a pyproject
    assert junit.rootdir(["pytest", "-q", "--rootdir=tests"], tmp_path) == (tmp_path / "tests").resolve()
    assert junit.rootdir(["pytest", "--rootdir", "../.."], tmp_path) == tmp_path.resolve()  # not out of the checkout
    (tmp_path / "tests" / "pyproject.toml").unlink()
    assert junit.rootdir(command, tmp_path) == tmp_path.resolve()
    assert junit.narrow_to_test(command, "tests/test_suite.py::test_a", tmp_path)[-1] == "tests/test_suite.py::test_a"


def test_a_narrowed_run_that_ran_no_test_is_reported_as_such(tmp_path):
    (tmp_path / "test_suite.py").write_text(SUITE)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_suite.py::test_gone"]
    code, ran = _junit_ids(command, tmp_path, tmp_path / "one.xml")
    assert code == 4 and ran == []
    assert "pytest exited 4" in junit.nothing_ran(code, "test_suite.py::test_gone")
    empty = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-k", "nothing"], cwd=tmp_path)
    assert "no tests collected" in junit.nothing_ran(empty.returncode, "test_suite.py::test_a")
    assert junit.nothing_ran(1, "test_suite.py::test_a") is None  # it ran and failed: that is evidence


def test_a_pyargs_suite_narrowed_to_some_of_its_tests_runs_only_those(tmp_path):
    # `--pyargs mypkg.tests` names a module, not a path: narrowed, it must not still be
    # collected whole beside the node ids (jsonschema's own suite runs this way).
    (tmp_path / "mypkg" / "tests").mkdir(parents=True)
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "tests" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "tests" / "test_suite.py").write_text(SUITE)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--pyargs", "mypkg.tests", "-k", "tests"]
    code, ids = _junit_ids(command, tmp_path, tmp_path / "all.xml")
    assert code == 0 and len(ids) == 2, ids
    narrowed = junit.narrow_to_tests(command, ids[1:], tmp_path)
    assert "mypkg.tests" not in narrowed and narrowed[-3:] == ["-k", "tests", ids[1]]
    assert _junit_ids(narrowed, tmp_path, tmp_path / "one.xml") == (0, ids[1:])
    # The drill's narrowing to one test, the same way.
    alone = junit.narrow_to_test(command, ids[0], tmp_path)
    assert "mypkg.tests" not in alone and alone[-1] == ids[0]
    assert _junit_ids(alone, tmp_path, tmp_path / "alone.xml") == (0, ids[:1])
