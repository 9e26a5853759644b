"""What each make target installs: a user's `make demo` / `make install` only what running
lagtrace needs, the targets that test or check it the test extra as well (`make -n`
prints the commands a fresh clone would run, without running them)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import REPO

INSTALL_RUNTIME = "/bin/python -e .\n"  # the end of uv's install line (`--python <venv>/bin/python`)
INSTALL_TEST = "/bin/python -e '.[test]'"


def _planned(target: str, tmp_path) -> str:
    make = shutil.which("make")
    if make is None:
        pytest.fail("make is not installed (apt-get install make)")
    done = subprocess.run(
        [make, "-n", target, f"VENV={tmp_path / 'venv'}"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("target", ["demo", "install"])
def test_demo_and_install_install_only_what_lagtrace_needs(target, tmp_path):
    planned = _planned(target, tmp_path)
    assert INSTALL_RUNTIME in planned
    assert "[test]" not in planned


@pytest.mark.parametrize("target", ["check", "unit", "test"])
def test_the_targets_that_test_install_the_test_extra(target, tmp_path):
    planned = _planned(target, tmp_path)
    assert INSTALL_RUNTIME in planned and INSTALL_TEST in planned
    assert planned.index(INSTALL_TEST) < planned.index("bin/pytest" if target != "check" else "bin/ruff check")
