"""`lagtrace run --kind gate`: the suite once in the widest configuration, each test
against the runs earlier matrix jobs of the same command stored there, and only what
moved measured in every configuration (services/jobs/gate.py)."""

from __future__ import annotations

import sys

from tests.conftest import run_cli
from tests.web.conftest import build_dashboard

SUITE = """\
import time
from pathlib import Path


def test_steady_a():
    time.sleep(0.05)


def test_steady_b():
    time.sleep(0.05)


def test_target():
    time.sleep(float((Path(__file__).parent / "delay").read_text()))
"""
ADDED = """\
import time


def test_added():
    time.sleep(0.05)
"""
STEADY = ("test_suite.py::test_steady_a", "test_suite.py::test_steady_b")
TARGET = "test_suite.py::test_target"


def lagtrace_run(sqlite_url, suite, out, kind: str) -> dict:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    args = ["run", "--executor", "local", "--config", "cpuset=0", "--config", "cpuset=0-1", "--repeat", "5"]
    args += ["--evidence", "none", "--project", "gate-demo", "--workdir", str(suite), "--kind", kind]
    result = run_cli([*args, "--json", str(out), "--", *command], sqlite_url)
    assert result.returncode == 0, result.stderr
    report = result.report(out)
    report["stdout"] = result.stdout
    return report


def ran_in(report: dict, label: str) -> set[str]:
    """The tests the matrix ran in a configuration (the gate's own runs are not listed)."""
    return {t["id"] for t in report["tests"] if any(c["label"] == label and c["runs"] for c in t["configs"])}


def test_a_gate_judges_each_test_against_history_and_sends_on_only_what_moved(sqlite_url, tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_suite.py").write_text(SUITE)
    (suite / "delay").write_text("0.05")
    history = [lagtrace_run(sqlite_url, suite, tmp_path / f"matrix{n}.json", "matrix") for n in range(2)]
    stored_jobs = [report["job"]["id"] for report in reversed(history)]  # newest first
    assert all(report["gate"] is None for report in history)

    # Nothing changed: every test stops at its one run, and no other configuration runs.
    calm = lagtrace_run(sqlite_url, suite, tmp_path / "calm.json", "gate")
    assert calm["job"]["kind"] == "gate" and calm["gate"]["config"] == "cpuset=0-1"
    verdicts = {test["test"]: test for test in calm["gate"]["tests"]}
    assert set(verdicts) == {*STEADY, TARGET}
    assert all(test["verdict"] == "unchanged" and not test["went_on"] for test in verdicts.values()), verdicts
    assert all(test["stored"] >= calm["gate"]["min_stored"] for test in verdicts.values()), verdicts
    assert all(test["jobs"] == stored_jobs for test in verdicts.values()), (verdicts, stored_jobs)
    assert ran_in(calm, "cpuset=0") == set() and not calm["findings"]
    assert "Gate: each test run once with cpuset=0-1" in calm["stdout"]

    # test_target now sleeps 10x as long, and a test is added: those two go on.
    (suite / "delay").write_text("0.5")
    (suite / "test_added.py").write_text(ADDED)
    moved = lagtrace_run(sqlite_url, suite, tmp_path / "moved.json", "gate")
    verdicts = {test["test"]: test for test in moved["gate"]["tests"]}
    assert verdicts[STEADY[0]]["jobs"] == [calm["job"]["id"], *stored_jobs]
    target, added = verdicts[TARGET], verdicts["test_added.py::test_added"]
    assert target["verdict"] == "regressed" and target["went_on"], target
    assert target["ratio"] > 5 and target["stored"] >= moved["gate"]["min_stored"], target
    # A run outside its history is judged on more runs, then stops once decided.
    assert 2 <= len(target["fresh_s"]) <= 6, target
    assert added["verdict"] == "new" and added["stored"] == 0 and added["went_on"], added
    assert all(verdicts[test]["verdict"] == "unchanged" and not verdicts[test]["went_on"] for test in STEADY)
    assert moved["gate"]["counts"] == {"regressed": 1, "new": 1, "unchanged": 2}
    # The matrix after the gate: every configuration, narrowed to what went on.
    assert ran_in(moved, "cpuset=0") == {TARGET, "test_added.py::test_added"}
    assert "regressed" in moved["stdout"] and TARGET in moved["stdout"]
    # A regression against history is a finding on its test, as against a base commit.
    [slower] = [f for f in moved["findings"] if f["kind"] == "slower_than_base"]
    assert slower["test"] == TARGET and slower["metrics"]["base_commit"] is None, slower
    assert slower["metrics"]["ratio"] > 5 and "stored runs" in slower["title"], slower

    # The job page shows the same verdicts.
    dashboard = build_dashboard(sqlite_url, tmp_path / "web", run_jobs=False, migrated=True)
    try:
        dashboard.add_user("ada", ["gate-demo"])
        dashboard.sign_in("ada")
        html = dashboard.page(f"/jobs/{moved['job']['id']}")
    finally:
        dashboard.engine.dispose()
    section = html.split('<section id="gate">', 1)[1].split("</section>", 1)[0]
    assert "Against history with <code>cpuset=0-1</code>" in section
    row = section.split(f"<code>{TARGET}</code>", 1)[1].split("</tr>", 1)[0]
    assert "<strong>regressed</strong>" in row and "11 from 3 jobs" in row, row
    assert STEADY[0] not in section  # unchanged tests are counted, not listed

    # What the gate sent on was measured in every configuration: history from then on, so
    # the next gate compares test_target with its new normal too.
    again = lagtrace_run(sqlite_url, suite, tmp_path / "again.json", "gate")
    # Each gate's one run of the whole suite is history too; its later runs are not.
    jobs = {test["test"]: test["jobs"] for test in again["gate"]["tests"]}
    gates = [moved["job"]["id"], calm["job"]["id"]]
    assert all(jobs[test] == [*gates, *stored_jobs] for test in (*STEADY, TARGET)), jobs
    stored = {test["test"]: test["stored"] for test in again["gate"]["tests"]}
    assert stored[TARGET] >= stored[STEADY[0]] + 5, stored  # the matrix's runs of what went on
