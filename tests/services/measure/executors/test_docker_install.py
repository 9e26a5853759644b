"""The prepare step installs a real project the way its own CI does, against the real
engine and runner image, with no network (the default): a src/ layout whose tests import
the package, with pallets' requirements/ directory; and a failed install names its command.

Nothing is downloaded: the build backend (setuptools) comes from the runner image's own
wheels, the test requirement from a wheel in the tree (tests/service_support.write_wheel).
"""

from __future__ import annotations

import time
from pathlib import Path

import docker
import pytest

from services.errors import LagtraceError
from services.measure.configs import CpuConfig
from services.measure.executors import docker_engine
from services.measure.executors.base import RunRequest
from services.measure.executors.docker import DockerExecutor
from services.settings import Settings
from tests.conftest import require
from tests.service_support import write_wheel


@pytest.fixture(scope="module", autouse=True)
def engine():
    problem = docker_engine.unavailable_reason(Settings().docker_image)
    require(problem is None, f"no usable Docker engine: {problem}")
    client = docker.from_env()
    yield client
    client.close()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    tmp_path.chmod(0o755)  # pytest makes it 0700; the container's uid 1000 must read it
    directory = tmp_path / "project"
    directory.mkdir()
    return directory


def executor(tmp_path: Path) -> DockerExecutor:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'lagtrace.db'}", docker_prepare_network="none")
    # A scope of its own: this test really installs, never a cached image.
    return DockerExecutor(settings, cache_scope=f"test-install-{time.time_ns()}")


def write(tree: Path, files: dict[str, str]) -> None:
    for name, content in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(content)
    for path in [tree, *tree.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


def run(executor: DockerExecutor, tree: Path, command: list[str]) -> tuple[int, str]:
    run_dir = tree.parent / f"run{time.time_ns()}"
    run_dir.mkdir()
    result = executor.run(RunRequest(command, tree, CpuConfig("all"), run_dir, 120, job_id=0))
    return result.exit_code, (run_dir / "output.log").read_text()


def test_a_src_layout_with_a_requirements_directory_runs_its_tests_unmodified(tree, tmp_path, engine):
    wheels = tree / "wheels"
    wheels.mkdir()
    helper = write_wheel(wheels, "lagtrace_test_helper", "1.0")
    write(
        tree,
        {
            "pyproject.toml": (
                '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
                '[project]\nname = "srcpkg"\nversion = "1.0"\n\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'
            ),
            "src/srcpkg/__init__.py": "def answer():\n    return 42\n",
            # pallets' layout: the test set is installed; the others would fail if they were.
            "requirements/tests.txt": f"./wheels/{helper.name}\n",
            "requirements/docs.txt": "lagtrace-no-such-docs-tool==99\n",
            "requirements/typing.txt": "lagtrace-no-such-type-checker==99\n",
            "tests/test_srcpkg.py": (
                "import lagtrace_test_helper\nimport srcpkg\n\n\ndef test_the_package_is_the_trees():\n"
                "    assert srcpkg.answer() == 42\n"
                "    assert srcpkg.__file__ == '/workspace/src/srcpkg/__init__.py'\n"
                "    assert lagtrace_test_helper.VERSION == '1.0'\n"
            ),
        },
    )
    # The default installs the test set alone, and names the project as left out:
    # building it may need an index (its dependencies, its build backend).
    messages: list[str] = []
    alone = executor(tmp_path)
    alone.prepare(tree, messages.append)
    engine.images.remove(alone.run_image, force=True)
    assert "`pip install -r requirements/tests.txt`" in messages[-1], messages
    assert (
        "not installed: requirements/docs.txt, requirements/typing.txt, "
        "the project itself (pyproject.toml)" in messages[-1]
    ), messages
    # The project's own CI line in .lagtrace.yml: setuptools is in the runner image.
    write(tree, {".lagtrace.yml": "command: pytest\ninstall: pip install -e . -r requirements/tests.txt\n"})
    prepare = executor(tmp_path)
    prepare.prepare(tree, messages.append)
    try:
        assert "`pip install -e . -r requirements/tests.txt`" in messages[-1], messages
        # No `pythonpath = src`, no conftest: the project is installed, editable.
        code, output = run(prepare, tree, ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"])
        assert code == 0 and "1 passed" in output, output
        # Editable: the code is read from the tree at run time, so a change to it needs no
        # install, and the next job takes the cached image.
        (tree / "src" / "srcpkg" / "__init__.py").write_text("def answer():\n    return 43\n")
        again = DockerExecutor(prepare.settings, cache_scope=prepare.cache_scope)
        again.prepare(tree, messages.append)
        assert again.run_image == prepare.run_image and "cached in image" in messages[-1], messages
        code, output = run(again, tree, ["python3", "-c", "import srcpkg; print(srcpkg.answer())"])
        assert (code, output.split()) == (0, ["43"]), output
    finally:
        engine.images.remove(prepare.run_image, force=True)


def test_a_failed_install_names_its_command_its_files_and_the_network(tree, tmp_path):
    write(tree, {"requirements/tests.txt": "lagtrace-no-such-package==1.0\n"})
    with pytest.raises(LagtraceError) as failed:
        executor(tmp_path).prepare(tree, lambda message: None)
    message = str(failed.value)
    assert "installing the dependencies failed (exit 1): `pip install -r requirements/tests.txt`" in message
    assert "found from requirements/tests.txt" in message and "lagtrace-no-such-package" in message, message
    # Not found because nothing could be downloaded: the message says so, and what to set.
    assert "no network (LAGTRACE_DOCKER_PREPARE_NETWORK=none)" in message, message
    # `install:` names a file the tree lacks: pip's own words, and the command.
    write(tree, {".lagtrace.yml": "command: pytest\ninstall: pip install -r requirements/ci.txt\n"})
    with pytest.raises(LagtraceError) as failed:
        executor(tmp_path).prepare(tree, lambda message: None)
    message = str(failed.value)
    assert "`pip install -r requirements/ci.txt` (`install:` in .lagtrace.yml)" in message, message
    assert "No such file or directory: 'requirements/ci.txt'" in message, message
    assert "LAGTRACE_DOCKER_PREPARE_NETWORK" not in message, message


def test_an_install_that_prints_without_end_is_read_by_its_tail(tree, tmp_path):
    # A local package whose build prints 24 MB, then fails: the engine keeps 8 MB of it,
    # and the worker reads its last lines, with pip's error, not the whole log.
    write(
        tree,
        {
            "noisy/setup.py": (
                "import sys\nfor _ in range(24):\n    sys.stdout.write(('x' * 1023 + '\\n') * 1024)\n"
                "sys.stdout.flush()\nraise SystemExit('lagtrace-noisy-build-failed')\n"
            ),
            "requirements.txt": "./noisy\n",
        },
    )
    started = time.monotonic()
    with pytest.raises(LagtraceError) as failed:
        executor(tmp_path).prepare(tree, lambda message: None)
    message = str(failed.value)
    assert "installing the dependencies failed" in message and "`pip install -r requirements.txt`" in message
    assert len(message) < 64 * 1024, len(message)
    assert time.monotonic() - started < 120
