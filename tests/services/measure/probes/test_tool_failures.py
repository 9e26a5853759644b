"""A tool that fails says why: a process that is gone is not a ptrace denial."""

import shutil
import subprocess

import pytest

from services.evidence import dump as stored
from services.measure.executors.base import ToolResult
from services.measure.executors.local import LocalProcessHandle
from services.measure.probes.base import DENIED, ENDED, tool_failure
from tests.conftest import require


def test_gcore_on_a_process_that_has_exited_is_reported_as_ended(tmp_path):
    require(shutil.which("gcore") is not None, "gcore (Debian package gdb) is not installed")
    gone = subprocess.Popen(["true"])
    gone.wait()
    result = LocalProcessHandle(gone.pid).run_tool(["gcore", "-o", str(tmp_path / "core"), str(gone.pid)], 30)
    assert result.returncode != 0
    draft = tool_failure("gdb", "gcore", result)
    assert draft.status == ENDED
    assert "ended while gcore was attaching" in stored(draft.content)["reason"]


@pytest.mark.parametrize("output", ["ptrace: Operation not permitted.", "Could not attach: Permission denied"])
def test_a_real_denial_is_still_a_denial(output):
    draft = tool_failure("gdb", "gcore", ToolResult(1, "", output, 0.1))
    assert draft.status == DENIED
