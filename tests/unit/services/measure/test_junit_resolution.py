"""The resolution lagtrace assumes for JUnit durations is the one pytest writes."""

from __future__ import annotations

import re
import subprocess
import sys

from services.measure import pytest_command as junit


def test_pytest_writes_durations_to_the_millisecond(tmp_path):
    (tmp_path / "test_quick.py").write_text("def test_quick():\n    pass\n")
    out = tmp_path / "junit.xml"
    command = junit.with_junit([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], str(out))
    subprocess.run(command, cwd=tmp_path, check=True, capture_output=True, timeout=60)
    times = re.findall(r'<testcase [^>]*time="([0-9.]+)"', out.read_text())
    assert times and all(len(t.split(".")[1]) == 3 for t in times)
    assert 10 ** -len(times[0].split(".")[1]) == junit.JUNIT_RESOLUTION_S
    # What lagtrace reads back is on that grid (how long the empty test took depends on
    # the machine's load, so it is not asserted).
    [case] = junit.parse(out)
    ticks = case.duration_s / junit.JUNIT_RESOLUTION_S
    assert abs(ticks - round(ticks)) < 1e-6
