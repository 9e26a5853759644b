"""slow_startup's knob: a pytest plugin that takes most of the start-up, taken out with
`-p no:NAME` by the confirm step (services/measure/confirm.py), its entry point's name
read in the job's own environment. The plugin is installed the way pip installs one (a
dist-info whose entry_points.txt names it in the pytest11 group), beside the suite:
`python -m pytest` puts the working directory on sys.path, where importlib.metadata
finds it."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import run_cli

SUITE = """\
def test_one():
    pass


def test_two():
    pass
"""
# The module the entry point loads is not the one whose import is slow (as hypothesis's
# plugin `_hypothesis_pytestplugin` imports `hypothesis`), and the entry point's name is
# neither: `-p no:` needs the name.
PLUGIN = """\
import heavylib  # noqa: F401
"""
HEAVY = """\
import time

time.sleep(1.2)  # a plugin's imports: a second of start-up before any test runs
"""
DIST = "slowplug-1.0.dist-info"


def _suite(directory):
    directory.mkdir()
    (directory / "test_suite.py").write_text(SUITE)
    (directory / "slowplug_plugin.py").write_text(PLUGIN)
    (directory / "heavylib.py").write_text(HEAVY)
    info = directory / DIST
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: slowplug\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pytest11]\nslow = slowplug_plugin\n")
    (info / "RECORD").write_text(f"slowplug_plugin.py,,\nheavylib.py,,\n{DIST}/METADATA,,\n{DIST}/RECORD,,\n")


@pytest.mark.latency
def test_a_plugin_that_holds_the_start_up_is_taken_out_and_the_cause_confirmed(sqlite_url, tmp_path):
    suite = tmp_path / "suite"
    _suite(suite)
    out = tmp_path / "report.json"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_suite.py"]
    args = ["run", "--executor", "local", "--config", "cpuset=0", "--config", "cpuset=0-1", "--repeat", "3"]
    args += ["--evidence", "imports", "--workdir", str(suite), "--json", str(out), "--", *command]
    result = run_cli(args, sqlite_url)
    assert result.returncode == 0, result.stderr
    report = result.report(out)
    [startup] = [d for d in report["diagnoses"] if d["cause"] and d["cause"]["kind"] == "slow_startup"]
    assert startup["severity"] in ("medium", "high"), startup
    # The import the evidence named (heavylib) belongs to the plugin whose entry point is
    # "slow": that is the flag turned, and it took the second away.
    assert startup["knob_confirmed"] is True, startup
    assert "-p no:slow " in startup["knob"] and startup["knob"].startswith("confirmed"), startup["knob"]
    [experiment] = [e for e in report["evidence"] if e["kind"] == "confirm"]
    content = experiment["content"]
    assert content["knob"] == "-p no:slow"
    assert max(content["with_s"]) + 0.8 < min(content["without_s"]), content
