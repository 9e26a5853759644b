import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli
from cli.run import run_job
from services.errors import BadInput
from services.jobs.report import render_text
from services.measure.artifacts import make_artifact_store
from services.measure.drill import parse_evidence
from services.measure.pytest_command import narrow_to_test
from services.settings import Settings

REPO = Path(__file__).resolve().parents[3]
HANDOFF = REPO / "examples" / "handoff.py"


def test_parse_evidence():
    assert parse_evidence(None) is None
    assert parse_evidence("none") == []
    assert parse_evidence("all") == ["strace", "pyspy", "core", "faulthandler", "imports"]
    assert parse_evidence("core, strace,core") == ["core", "strace"]
    with pytest.raises(BadInput, match="unknown probe gdb"):
        parse_evidence("strace,gdb")


def test_narrow_to_test_swaps_test_paths_for_the_node_id(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "conf").mkdir()
    command = ["python", "-m", "pytest", "-x", "tests", "--rootdir", "conf", "-k", "tests"]
    assert narrow_to_test(command, "tests/test_a.py::test_b", tmp_path) == [
        "python",
        "-m",
        "pytest",
        "-x",
        "--rootdir",
        "conf",
        "-k",
        "tests",
        "tests/test_a.py::test_b",
    ]


@pytest.mark.latency
def test_run_with_evidence_stores_probes_artifacts_and_observer_data(tmp_path):
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'db.sqlite'}", artifact_dir=tmp_path / "artifacts")
    messages = []
    report = run_job(
        settings,
        command=[sys.executable, str(HANDOFF), "10000000"],
        executor_name="local",
        specs=["cpuset=0", "cpuset=0-1"],
        repeat=1,
        timeout_s=2.5,
        workdir=tmp_path,
        project="drill-test",
        evidence="strace,pyspy,core,faulthandler",
        stall_after_s=0.8,
        progress=messages.append,
    )
    by_kind = {}
    for entry in report["evidence"]:
        by_kind.setdefault(entry["kind"], []).append(entry)
    # Every probe ran in both configurations, each in its own evidence run.
    assert {run["probe"] for run in report["evidence_runs"]} == {"strace", "pyspy", "core", "faulthandler"}
    assert {run["config"] for run in report["evidence_runs"]} == {"cpuset=0", "cpuset=0-1"}
    assert len(report["evidence_runs"]) == 8
    for run in report["evidence_runs"]:
        assert run["timing_median_s"] is not None and run["wall_s"] > 0
    # Timing runs stay separate from evidence runs.
    assert all(len(config["runs"]) == 1 for config in report["configs"])

    strace = by_kind["strace"][0]
    assert strace["content"]["syscalls"][0]["name"] == "futex"
    assert strace["content"]["run"]["timing_median_s"] is not None
    gdb = [e for e in by_kind["gdb"] if e["content"]["status"] == "ok"]
    assert gdb and all("threads" in e["content"] for e in gdb)
    assert all(t.keys() >= {"id", "waiting_for_gil", "frames"} for e in gdb for t in e["content"]["threads"])
    store = make_artifact_store(settings)
    core = gdb[0]["artifacts"][0]
    assert core["name"].startswith("core.") and core["stored_size"] < core["size"]
    svg = by_kind["pyspy"][0]["artifacts"][0]
    assert store.read_bytes(svg["key"]).lstrip().startswith(b"<?xml")
    assert by_kind["faulthandler"][0]["content"]["status"] == "ok"

    text = render_text(report)
    assert "futex holds" in text
    assert "waiting for the GIL (read by gdb" in text
    assert "Evidence runs" in text


def test_cli_rejects_bad_evidence_options(tmp_path):
    runner = CliRunner()
    result = runner.invoke(
        cli,
        ["run", "--evidence", "bogus", "--", "true"],
        env={"LAGTRACE_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}"},
    )
    assert result.exit_code == 2 and "unknown probe bogus" in result.output
    result = runner.invoke(
        cli,
        ["run", "--stall-after", "5", "--timeout", "2", "--", "true"],
        env={"LAGTRACE_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}"},
    )
    assert result.exit_code == 2 and "must be below --timeout" in result.output
