"""What a gate job keeps of the findings earlier jobs made (services/jobs/gate.py
record_findings), on SQLite and PostgreSQL.

A gate sends on the tests with findings in the previous job that moved; where the
budget then leaves such a test out of the matrix, the job has no verdict on it. Before
these findings were carried, a 60 s suite's first gate spent its budget checking a
CPU-sensitive hand-off (tests/bench/bench_gate_jobs.py), left it out, and its finding
vanished from that gate and every later one, which carry from their previous job."""

from __future__ import annotations

from pathlib import Path

from services.diagnose.findings import fingerprint
from services.jobs import gate, lifecycle
from services.measure import budget
from services.measure.configs import CpuConfig
from services.models import Finding, Job, JobConfig, JobKind, JobStatus
from services.thresholds import Thresholds

COMMAND = ["python3", "-m", "pytest", "-q"]
HAND_OFF, REFOUND, HEALTHY = "test_a.py::test_hand_off", "test_a.py::test_refound", "test_a.py::test_healthy"


def a_job(session, kind: JobKind) -> Job:
    job = lifecycle.create_job(
        session,
        project="shop",
        command=COMMAND,
        configs=[CpuConfig("cpuset=0-1", cpuset=(0, 1)), CpuConfig("cpus=0.5", cpus=0.5)],
        executor="local",
        workdir=None,
        repeat=5,
        timeout_s=None,
        source="api",
        kind=kind,
    )
    session.flush()
    return job


def cpu_sensitivity(job: Job, test_id: str, detail: str) -> Finding:
    return Finding(
        job=job,
        kind="cpu_sensitivity",
        severity="high",
        title=f"{test_id} is 12x slower with cpus=0.5 than with cpuset=0-1",
        detail=detail,
        config_label="cpus=0.5",
        test_id=test_id,
        metrics={"ratio": 12.0},
        evidence_ids=[],
        fingerprint=fingerprint("shop", "cpu_sensitivity", test_id),
    )


def test_a_test_sent_on_and_left_out_by_the_budget_keeps_the_findings_it_had(db_session):
    session = db_session
    matrix = a_job(session, JobKind.matrix)
    session.add_all(
        [
            cpu_sensitivity(matrix, HAND_OFF, "median 12 s with cpus=0.5 against 1 s with cpuset=0-1"),
            cpu_sensitivity(matrix, REFOUND, "median 9 s with cpus=0.5 against 1 s with cpuset=0-1"),
        ]
    )
    lifecycle.mark_finished(matrix, JobStatus.done)
    session.flush()

    job = a_job(session, JobKind.gate)
    result = gate.GateResult("cpuset=0-1", None, 9)
    for test in (HAND_OFF, REFOUND, HEALTHY):
        row = gate.GateTest(test, gate.NEW, 2, [matrix.id], [1.0])
        row.went_on = True
        result.tests.append(row)
    job.gate = result.as_json()
    budget.leave_out(job, Thresholds(), budget.TESTS, [HAND_OFF, REFOUND, HEALTHY])
    # This job's rules found one of them again (from its survey's runs): that one is its own.
    session.add(cpu_sensitivity(job, REFOUND, "found again by this job"))
    session.flush()

    gate.record_findings(session, job, Thresholds())
    session.flush()

    found = {(f.test_id, f.detail.split(" (measured")[0]): f for f in session.query(Finding).filter_by(job_id=job.id)}
    assert set(found) == {
        (HAND_OFF, "median 12 s with cpus=0.5 against 1 s with cpuset=0-1"),
        (REFOUND, "found again by this job"),
    }, found
    carried = found[HAND_OFF, "median 12 s with cpus=0.5 against 1 s with cpuset=0-1"]
    assert f"(measured in job {matrix.id}; {gate.LEFT_OUT})" in carried.detail
    assert carried.severity == "high" and carried.fingerprint == fingerprint("shop", "cpu_sensitivity", HAND_OFF)

    # The next gate, left out again, carries it from this one: it still names the job
    # that measured it, once.
    lifecycle.mark_finished(job, JobStatus.done)
    later = a_job(session, JobKind.gate)
    later.gate = result.as_json()
    budget.leave_out(later, Thresholds(), budget.TESTS, [HAND_OFF])
    session.flush()
    gate.record_findings(session, later, Thresholds())
    session.flush()
    [again] = session.query(Finding).filter_by(job_id=later.id, test_id=HAND_OFF).all()
    assert again.detail.count("measured in job") == 1 and f"measured in job {matrix.id};" in again.detail


def test_a_test_the_budget_left_out_that_did_not_go_on_carries_nothing_new(db_session):
    session = db_session
    matrix = a_job(session, JobKind.matrix)
    session.add(cpu_sensitivity(matrix, HAND_OFF, "median 12 s"))
    lifecycle.mark_finished(matrix, JobStatus.done)
    session.flush()
    job = a_job(session, JobKind.gate)
    result = gate.GateResult("cpuset=0-1", None, 9)
    result.tests.append(gate.GateTest(HAND_OFF, gate.UNCHANGED, 12, [matrix.id], [1.0]))  # went_on False
    job.gate = result.as_json()
    budget.leave_out(job, Thresholds(), budget.TESTS, [HAND_OFF])
    session.flush()
    gate.record_findings(session, job, Thresholds())
    session.flush()
    assert session.query(Finding).filter_by(job_id=job.id).count() == 0


def test_a_flagged_test_is_checked_only_where_a_run_can_tell_and_only_until_it_moved(db_session):
    """A flagged test with too short a history in some configuration goes on whatever a run
    shows, so it costs no check run; one that moved in one configuration is not run in the
    next; one inside its history everywhere is run once in each and carries its findings."""
    session = db_session
    matrix = a_job(session, JobKind.matrix)
    session.add_all([cpu_sensitivity(matrix, test, "measured") for test in (HAND_OFF, REFOUND, HEALTHY)])
    lifecycle.mark_finished(matrix, JobStatus.done)
    job = a_job(session, JobKind.gate)
    job.configs.append(JobConfig(label="cpuset=0", cpuset="0", position=2))
    session.flush()
    wide, quota, narrow = job.configs
    stored = [1.0 + i / 100 for i in range(12)]
    histories = {
        quota.id: {HAND_OFF: gate.History(stored), REFOUND: gate.History(stored), HEALTHY: gate.History(stored)},
        # HEALTHY has too short a history with cpuset=0 (under min_stored).
        narrow.id: {HAND_OFF: gate.History(stored), REFOUND: gate.History(stored), HEALTHY: gate.History(stored[:3])},
    }
    ran: list[tuple[str, list[str]]] = []

    def measure(command, look, where, warm=False):
        tests = [word for word in command if "::" in word]
        ran.append((where.label, tests))
        # REFOUND failed with cpus=0.5: it moved there.
        return {t: ("failed" if t == REFOUND and where is quota else "passed", 1.05) for t in tests}

    flagged = [gate.GateTest(test, gate.UNCHANGED, 12, [matrix.id], [1.0]) for test in (HAND_OFF, REFOUND, HEALTHY)]
    gate._check_flagged(
        session,
        job,
        wide,
        flagged,
        gate.rule_of(Thresholds()),
        Thresholds(),
        Path("/nonexistent"),
        measure,
        lambda where, ids: histories[where.id],
        lambda message: None,
    )
    assert ran == [("cpus=0.5", [HAND_OFF, REFOUND]), ("cpuset=0", [HAND_OFF])], ran
    went_on = {test.test: (test.went_on, test.carried_from) for test in flagged}
    assert went_on == {HAND_OFF: (False, matrix.id), REFOUND: (True, None), HEALTHY: (True, None)}
