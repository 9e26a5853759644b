"""`lagtrace run --kind gate`: the suite once in the widest configuration, each test
against the runs earlier matrix jobs of the same command stored there, and only what
moved measured in every configuration (services/jobs/gate.py)."""

from __future__ import annotations

import re
import sys

import pytest
from sqlalchemy import select

from services.db import make_engine, make_session_factory
from services.diagnose.findings import fingerprint
from services.jobs import gate
from services.models import Finding, Job, Run, RunKind
from services.settings import Settings
from tests.conftest import run_cli
from tests.metrics_support import cpu_sensitivity
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


def found_before(sqlite_url: str, job_id: int, test_id: str) -> None:
    """The finding a matrix job makes on a CPU-sensitive test, stored on ``job_id`` (these
    sleeping tests have none of their own: what the gate does with one is what is tested)."""

    metrics = cpu_sensitivity(("cpuset=0", 0.2), ("cpuset=0-1", 0.05), family_size=3)
    engine = make_engine(Settings(database_url=sqlite_url))
    try:
        with make_session_factory(engine)() as session:
            job = session.get(Job, job_id)
            assert job is not None
            session.add(
                Finding(
                    job=job,
                    kind="cpu_sensitivity",
                    severity="medium",
                    title=f"{test_id} is 4.0x slower with cpuset=0 than with cpuset=0-1",
                    detail="median 0.2 s against 0.05 s",
                    config_label="cpuset=0",
                    test_id=test_id,
                    metrics=metrics.stored(),
                    evidence_ids=[],
                    fingerprint=fingerprint(job.project.name, "cpu_sensitivity", test_id),
                )
            )
            session.commit()
    finally:
        engine.dispose()


def calibrations_halved(sqlite_url: str) -> int:
    """The stored calibration runs made to say the node did the loop's work in half the CPU
    time it takes now (no node can be slowed on purpose here); how many there were."""
    engine = make_engine(Settings(database_url=sqlite_url))
    try:
        with make_session_factory(engine)() as session:
            runs = session.scalars(select(Run).where(Run.kind == RunKind.calibration)).all()
            for run in runs:
                run.user_s, run.sys_s = run.user_s / 2, run.sys_s / 2
            session.commit()
            return len(runs)
    finally:
        engine.dispose()


def calibration_runs(sqlite_url: str, job_id: int) -> int:
    engine = make_engine(Settings(database_url=sqlite_url))
    try:
        with make_session_factory(engine)() as session:
            job = session.get(Job, job_id)
            assert job is not None
            return sum(run.kind is RunKind.calibration for config in job.configs for run in config.runs)
    finally:
        engine.dispose()


# Latency: its healthy tests must stay unchanged, and beside the parallel tier's CPU work
# a matrix job once found one of them flaky with cpuset=0 (one core shared with the
# tier), so the gate rightly checked it again.
@pytest.mark.latency
def test_a_gate_judges_each_test_against_history_and_sends_on_only_what_moved(sqlite_url, tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_suite.py").write_text(SUITE)
    (suite / "delay").write_text("0.05")
    history = [lagtrace_run(sqlite_url, suite, tmp_path / f"matrix{n}.json", "matrix") for n in range(2)]
    stored_jobs = [report["job"]["id"] for report in reversed(history)]  # newest first
    assert all(report["gate"] is None for report in history)

    # The last matrix job found test_target CPU-sensitive.
    found_before(sqlite_url, stored_jobs[0], TARGET)

    # Nothing changed: every test stops at its one run, and no other configuration runs
    # the suite. test_target, flagged before, runs once more in cpuset=0: inside its
    # history there too, it carries its finding on, neither screened nor drilled again.
    calm = lagtrace_run(sqlite_url, suite, tmp_path / "calm.json", "gate")
    assert calm["gate"] is not None, calm["notes"]
    assert calm["job"]["kind"] == "gate" and calm["gate"]["config"] == "cpuset=0-1"
    verdicts = {test["test"]: test for test in calm["gate"]["tests"]}
    assert set(verdicts) == {*STEADY, TARGET}
    assert all(test["verdict"] == "unchanged" and not test["went_on"] for test in verdicts.values()), verdicts
    assert all(test["stored"] >= calm["gate"]["min_stored"] for test in verdicts.values()), verdicts
    assert all(test["jobs"] == stored_jobs for test in verdicts.values()), (verdicts, stored_jobs)
    assert [verdicts[test]["checked_s"] for test in STEADY] == [{}, {}]
    assert set(verdicts[TARGET]["checked_s"]) == {"cpuset=0"} and verdicts[TARGET]["carried_from"] == stored_jobs[0]
    assert ran_in(calm, "cpuset=0") == set() and not calm["evidence_runs"]
    [carried] = calm["findings"]
    assert carried["kind"] == "cpu_sensitivity" and carried["test"] == TARGET and carried["evidence"] == [], carried
    assert f"measured in job {stored_jobs[0]}" in carried["detail"] and carried["metrics"]["ratio"] == 4.0, carried
    assert "Gate: each test run once with cpuset=0-1" in calm["stdout"]
    assert f"no: job {stored_jobs[0]}'s findings carried" in calm["stdout"]

    # test_target now sleeps 6x as long (past the 5x the assertions below ask), and a test is
    # added: those two go on.
    (suite / "delay").write_text("0.3")
    (suite / "test_added.py").write_text(ADDED)
    moved = lagtrace_run(sqlite_url, suite, tmp_path / "moved.json", "gate")
    assert moved["gate"] is not None, moved["notes"]
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
    assert slower["severity"] == "high", slower  # 3x and more (regression_high_ratio)

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
    # The node held: 4 jobs' stored calibrations, this one beside them.
    assert again["gate"] is not None, again["notes"]
    jobs = {test["test"]: test["jobs"] for test in again["gate"]["tests"]}
    gates = [moved["job"]["id"], calm["job"]["id"]]
    assert all(jobs[test] == [*gates, *stored_jobs] for test in (*STEADY, TARGET)), jobs
    stored = {test["test"]: test["stored"] for test in again["gate"]["tests"]}
    assert stored[TARGET] >= stored[STEADY[0]] + 5, stored  # the matrix's runs of what went on
    # test_target's finding in `moved` compared it with its history: about one change, not
    # carried (it may be found again: most of its 20 stored runs still are the old 0.05 s).
    assert next(t for t in again["gate"]["tests"] if t["test"] == TARGET)["carried_from"] is None

    # The history's node did the calibration loop in half the CPU time: this node is not
    # that one, and its tests' runs say nothing against that history.
    halved = calibrations_halved(sqlite_url)
    # Each of the 5 jobs timed the loop thrice, or six times where a neighbour's burst made
    # its first three drift (services/jobs/gate.py times it again before declining).
    assert halved % gate.CALIBRATION_RUNS == 0 and 5 <= halved // gate.CALIBRATION_RUNS <= 10, halved
    drifted = lagtrace_run(sqlite_url, suite, tmp_path / "drifted.json", "gate")
    assert drifted["gate"] is None
    # Outside the ratio, the loop was timed three more times before the gate declined.
    assert calibration_runs(sqlite_url, drifted["job"]["id"]) == 2 * gate.CALIBRATION_RUNS
    [note] = [note for note in drifted["notes"] if note.startswith("the gate did not judge against history")]
    assert "calibration loop" in note and "every configuration was screened" in note, note
    assert 1.6 < float(re.search(r"of CPU, ([0-9.]+)x the", note)[1]) < 2.5, note
    assert ran_in(drifted, "cpuset=0") == {*STEADY, TARGET, "test_added.py::test_added"}
