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
from services.models import Evidence, Finding, Job, JobConfig, JobKind, JobStatus
from services.thresholds import Thresholds
from tests.metrics_support import cpu_sensitivity as cpu_sensitivity_metrics

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


def cpu_sensitivity(job: Job, test_id: str, detail: str, fast: str = "cpuset=0-1") -> Finding:
    return Finding(
        job=job,
        kind="cpu_sensitivity",
        severity="high",
        title=f"{test_id} is 12x slower with cpus=0.5 than with {fast}",
        detail=detail,
        config_label="cpus=0.5",
        test_id=test_id,
        metrics=cpu_sensitivity_metrics(("cpus=0.5", 12.0), (fast, 1.0), family_size=3).stored(),
        evidence_ids=[],
        fingerprint=fingerprint("shop", "cpu_sensitivity", test_id),
    )


def latency_flaky(job: Job, test_id: str, config_label: str, evidence_ids: list[int] | None = None) -> Finding:
    return Finding(
        job=job,
        kind="latency_flaky",
        severity="medium",
        title=f"{test_id} has two modes with {config_label}",
        detail="0.2 s in 2 of 5 runs, 0.001 s in 3",
        config_label=config_label,
        test_id=test_id,
        metrics={"pattern": "multimodal", "ratio": 200.0},
        evidence_ids=evidence_ids or [],
        fingerprint=fingerprint("shop", "latency_flaky", test_id),
    )


def check_flagged(session, job: Job, matrix: Job, tests, measure, history_in) -> list[gate.GateTest]:
    """The gate's check of ``tests``, flagged by ``matrix`` and unchanged in the gate's own
    configuration (the job's first), with the runs ``measure`` says and the histories
    ``history_in`` gives; the tests as the check left them."""
    flagged = [gate.GateTest(test, gate.UNCHANGED, 12, [matrix.id], [1.0]) for test in tests]
    gate._check_flagged(
        session,
        job,
        job.configs[0],
        flagged,
        gate.rule_of(Thresholds()),
        Thresholds(),
        Path("/nonexistent"),
        measure,
        history_in,
        lambda message: None,
    )
    return flagged


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
    session.add_all(
        [cpu_sensitivity(matrix, test, "measured", fast="cpuset=0") for test in (HAND_OFF, REFOUND, HEALTHY)]
    )
    lifecycle.mark_finished(matrix, JobStatus.done)
    job = a_job(session, JobKind.gate)
    job.configs.append(JobConfig(label="cpuset=0", cpuset="0", position=2))
    session.flush()
    _, quota, narrow = job.configs
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

    flagged = check_flagged(
        session, job, matrix, (HAND_OFF, REFOUND, HEALTHY), measure, lambda where, ids: histories[where.id]
    )
    assert ran == [("cpus=0.5", [HAND_OFF, REFOUND]), ("cpuset=0", [HAND_OFF])], ran
    went_on = {test.test: (test.went_on, test.carried_from) for test in flagged}
    assert went_on == {HAND_OFF: (False, matrix.id), REFOUND: (True, None), HEALTHY: (True, None)}


def test_a_flagged_test_is_checked_only_in_the_configurations_its_findings_name(db_session):
    """A run in a configuration no finding of the test names tells nothing about them: a
    test flagged for its spread with cpuset=0 runs only with cpuset=0, a CPU-sensitive one
    only on the slow side of its comparison (the fast side is the gate's own), one flagged
    in the gate's configuration nowhere else, and one whose evidence ran with cpuset=0
    there too. Each carries its findings."""
    session = db_session
    matrix = a_job(session, JobKind.matrix)
    matrix.configs.append(JobConfig(label="cpuset=0", cpuset="0", position=2))
    session.flush()
    _, _, matrix_narrow = matrix.configs
    spread, wide_only, evidenced = "test_a.py::test_spread", "test_a.py::test_wide_only", "test_a.py::test_evidenced"
    traced = Evidence(job=matrix, config=matrix_narrow, test_id=evidenced, kind="strace", content={})
    session.add(traced)
    session.flush()
    session.add_all(
        [
            latency_flaky(matrix, spread, "cpuset=0"),
            cpu_sensitivity(matrix, HAND_OFF, "measured"),
            latency_flaky(matrix, wide_only, "cpuset=0-1"),
            latency_flaky(matrix, evidenced, "cpus=0.5", evidence_ids=[traced.id]),
        ]
    )
    lifecycle.mark_finished(matrix, JobStatus.done)
    job = a_job(session, JobKind.gate)
    job.configs.append(JobConfig(label="cpuset=0", cpuset="0", position=2))
    session.flush()
    tests = (spread, HAND_OFF, wide_only, evidenced)
    stored = [1.0 + i / 100 for i in range(12)]
    ran: list[tuple[str, list[str]]] = []

    def measure(command, look, where, warm=False):
        ran.append((where.label, [word for word in command if "::" in word]))
        return {t: ("passed", 1.05) for t in tests}

    flagged = check_flagged(
        session, job, matrix, tests, measure, lambda where, ids: {test: gate.History(stored) for test in ids}
    )
    assert ran == [("cpus=0.5", [HAND_OFF, evidenced]), ("cpuset=0", [spread, evidenced])], ran
    assert {test.test: set(test.checked_s) for test in flagged} == {
        spread: {"cpuset=0"},
        HAND_OFF: {"cpus=0.5"},
        wide_only: set(),
        evidenced: {"cpus=0.5", "cpuset=0"},
    }
    assert all(not test.went_on and test.carried_from == matrix.id for test in flagged), flagged
    # Each carried finding names the runs it rests on, the gate's own among them.
    result = gate.GateResult("cpuset=0-1", None, 9)
    result.tests.extend(flagged)
    job.gate = result.as_json()
    session.flush()
    gate.record_findings(session, job, Thresholds())
    session.flush()
    details = {f.test_id: f.detail for f in session.query(Finding).filter_by(job_id=job.id)}
    assert set(details) == set(tests), details
    assert "with cpuset=0-1) sat inside its history in each configuration its findings name" in details[wide_only]
    assert "with cpuset=0-1, " in details[spread] and "with cpuset=0)" in details[spread], details[spread]
