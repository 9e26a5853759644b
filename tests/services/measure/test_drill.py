import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli
from cli.run import run_job
from services.errors import BadInput
from services.jobs.report_schema import report_json
from services.jobs.report_text import render_text
from services.measure.artifacts import make_artifact_store
from services.measure.drill import parse_evidence
from services.measure.probes import amplify
from services.measure.pytest_command import narrow_to_test
from services.settings import Settings

REPO = Path(__file__).resolve().parents[3]
HANDOFF = REPO / "examples" / "handoff.py"


def test_parse_evidence():
    assert parse_evidence(None) is None
    assert parse_evidence("none") == []
    assert parse_evidence("all") == ["strace", "pyspy", "core", "faulthandler", "imports", "reads", "asyncio_loop"]
    assert parse_evidence("core, strace,core") == ["core", "strace"]
    with pytest.raises(BadInput, match="unknown probe gdb"):
        parse_evidence("strace,gdb")


def test_narrow_to_test_swaps_test_paths_for_the_node_id(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "conf").mkdir()
    command = ["python", "-m", "pytest", "-x", "tests", "--rootdir", "conf", "-k", "tests"]
    # Node ids are relative to the rootdir (conf); the narrowed command names the test from the workdir.
    assert narrow_to_test(command, "../tests/test_a.py::test_b", tmp_path) == [
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
    built = run_job(
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
    report = report_json(built)  # read as the JSON `--json` writes
    by_kind = {}
    for entry in report["evidence"]:
        by_kind.setdefault(entry["kind"], []).append(entry)
    # Every probe ran in both configurations, each in its own evidence run.
    assert {run["probe"] for run in report["evidence_runs"]} == {"strace", "pyspy", "core", "faulthandler"}
    assert {run["config"] for run in report["evidence_runs"]} == {"cpuset=0", "cpuset=0-1"}
    assert len(report["evidence_runs"]) == 8
    # Every timing run hit the 2.5 s timeout: no median (docs/guides/run.md: timed-out runs are in
    # no statistic), a command_failed finding, and the drill still looks where it hangs.
    for run in report["evidence_runs"]:
        assert run["timing_median_s"] is None and run["wall_s"] > 0
    [hung] = [f for f in report["findings"] if f["kind"] == "command_failed"]
    assert hung["metrics"]["timed_out"] == hung["metrics"]["runs"] == 2
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

    text = render_text(built)
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


# A pytest suite whose start-up (conftest import) takes 2 s, as heavy imports under a
# small CPU quota do: the stall clock must count from each test's start, not pytest's.
SLOW_STARTUP_CONFTEST = "import time\ntime.sleep(2.0)\n"
QUICK_TEST = "import time\n\n\ndef test_quick():\n    time.sleep(0.03)\n"
STALLING_TEST = (
    "import time\n\n\ndef hold_up():\n    time.sleep(2.5)\n\n\n"
    "def test_quick():\n    time.sleep(0.03)\n\n\ndef test_stalls():\n    hold_up()\n"
)


def _pytest_job(tmp_path: Path, suite: str):
    (tmp_path / "conftest.py").write_text(SLOW_STARTUP_CONFTEST)
    (tmp_path / "test_suite.py").write_text(suite)
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'db.sqlite'}", artifact_dir=tmp_path / "artifacts")
    return report_json(
        run_job(
            settings,
            command=[sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_suite.py"],
            executor_name="local",
            specs=["cpuset=0-1"],
            repeat=1,
            timeout_s=15,
            workdir=tmp_path,
            project="per-test-clock",
            evidence="core",
            stall_after_s=1.0,
            progress=lambda message: None,
        )
    )


# Asserts when the snapshot was taken (1 s into the test, within 0.5 s) and that a 0.03 s
# test took under 0.1 s: serially, beside no other work.
@pytest.mark.latency
def test_stall_clock_counts_from_the_test_start_not_from_pytest_start_up(tmp_path):
    (tmp_path / "quick").mkdir()
    report = _pytest_job(tmp_path / "quick", QUICK_TEST)
    # The process ran for over 2 s, past the 1 s threshold, yet its one test took 0.03 s.
    # (The whole command and, when the screen flags it, the test itself are drilled.)
    runs = [r for r in report["evidence_runs"] if r["probe"] == "core"]
    assert runs and all(r["wall_s"] > 2.0 for r in runs)
    assert not [f for f in report["findings"] if f["kind"] == "stall"]
    stalls = [e for e in report["evidence"] if e["kind"] == "stall"]
    assert stalls and all(e["content"]["status"] == "no_stall" for e in stalls)
    for stall in stalls:
        assert stall["content"]["clock"] == "test" and stall["content"]["test_started_s"] > 1.9
        assert "the test took 0.0" in stall["content"]["reason"]

    (tmp_path / "stalling").mkdir()
    report = _pytest_job(tmp_path / "stalling", STALLING_TEST)
    finding = next(f for f in report["findings"] if f["kind"] == "stall")
    stall = next(e for e in report["evidence"] if e["kind"] == "stall" and e["content"]["status"] == "ok")
    content = stall["content"]
    # Snapshotted inside the stalling test, 1 s after it started (about 3 s into the run).
    assert content["test"] == "test_suite.py::test_stalls"
    assert 0.95 < content["test_elapsed_s"] < 1.5 and content["elapsed_s"] > 2.9
    dump = next(
        e for e in report["evidence"] if e["kind"] == "pyspy_dump" and e["content"]["run"]["run_id"] == stall["run"]
    )
    main = next(t for t in dump["content"]["threads"] if t["name"] == "MainThread")
    assert [f["function"] for f in main["frames"][:2]] == ["hold_up", "test_stalls"]
    assert "1.0" in finding["detail"] and "into the test" in finding["detail"]
    assert "py-spy dump of 1 of 1 Python process(es)" in finding["detail"]


# One test 15x slower when it may use two CPUs than when pinned to one: the screen flags it
# whatever the machine's noise, so the drill narrows the command to it.
CPU_DEPENDENT_TEST = (
    "import os, time\n\n\ndef test_depends_on_cpus():\n"
    "    time.sleep(0.3 if len(os.sched_getaffinity(0)) > 1 else 0.02)\n\n\n"
    "def test_steady():\n    time.sleep(0.01)\n"
)


@pytest.mark.latency
def test_per_test_evidence_runs_the_test_when_pytest_ini_sits_in_a_subfolder(tmp_path):
    project = tmp_path / "checkout" / "service"
    (project / "tests").mkdir(parents=True)
    (project / "pytest.ini").write_text("[pytest]\n")  # rootdir: service/, not the checkout
    (project / "tests" / "test_cpus.py").write_text(CPU_DEPENDENT_TEST)
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'db.sqlite'}", artifact_dir=tmp_path / "artifacts")
    report = report_json(
        run_job(
            settings,
            command=[sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "service/tests"],
            executor_name="local",
            specs=["cpuset=0", "cpuset=0-1"],
            repeat=5,
            timeout_s=30,
            workdir=tmp_path / "checkout",
            project="subfolder-ini",
            evidence="strace",
            stall_after_s=None,
            progress=lambda message: None,
        )
    )
    test_id = "tests/test_cpus.py::test_depends_on_cpus"
    assert any(f["kind"] == "cpu_sensitivity" and f["test"] == test_id for f in report["findings"]), report["findings"]
    per_test = [e for e in report["evidence"] if e["test"] == test_id]
    assert per_test, [(e["kind"], e["test"]) for e in report["evidence"]]
    for entry in per_test:
        # Before: the narrowed run named tests/test_cpus.py from the checkout, exited 4
        # (no such file) and its strace of pytest's usage error was stored as "ok".
        assert entry["content"]["run"]["exit_code"] == 0, entry["content"]
        assert entry["content"]["status"] == "ok", entry["content"]
        assert entry["content"]["run"]["observed_s"] < entry["content"]["run"]["wall_s"]  # the test's own time


# A test that computes 15 ms pinned to one CPU and 0.3 s when it may use two.
SHORT_COMPUTING_TEST = (
    "import os\n\n\ndef crunch(n):\n    total = 0\n    for i in range(n):\n        total += i * i\n    return total\n\n\n"
    "def test_short():\n    crunch(3_000_000 if len(os.sched_getaffinity(0)) > 1 else 150_000)\n"
)


@pytest.mark.latency
def test_a_short_test_is_repeated_in_its_evidence_runs_so_the_profile_sees_it(tmp_path):
    (tmp_path / "test_short.py").write_text(SHORT_COMPUTING_TEST)
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'db.sqlite'}", artifact_dir=tmp_path / "artifacts")
    report = report_json(
        run_job(
            settings,
            command=[sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_short.py"],
            executor_name="local",
            specs=["cpuset=0", "cpuset=0-1"],
            repeat=5,
            timeout_s=60,
            workdir=tmp_path,
            project="amplified",
            evidence="pyspy",
            stall_after_s=None,
            progress=lambda message: None,
        )
    )
    test_id = "test_short.py::test_short"
    profiles = [e for e in report["evidence"] if e["kind"] == "pyspy" and e["test"] == test_id]
    fast = next(p for p in profiles if p["config"] == "cpuset=0")
    run = fast["content"]["run"]
    # About 15 ms a run: a profile repeats it up to 3 s' worth (at most 200 times), reported once.
    assert 40 <= run["iterations"] <= amplify.PROFILE_MAX_ITERATIONS, run
    assert run["observed_s"] < 0.2 and run["wall_s"] > 0.4
    # One or two samples at 100 Hz without the repetitions; now the test's own loop holds many.
    [main] = [
        t
        for t in fast["content"]["functions"]
        if t["samples"] == max(x["samples"] for x in fast["content"]["functions"])
    ]
    crunch = next(f for f in main["functions"] if f["function"] == "crunch")
    assert crunch["own_samples"] >= 20, main
