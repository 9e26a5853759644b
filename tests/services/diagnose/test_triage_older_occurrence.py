"""A triage decision is the problem's: muting any occurrence carries to the next job.

The bug: muting an older occurrence (job 1's finding, while job 2 already had the same
problem) did not carry to job 3, since job 3 takes its triage from the latest occurrence.
"""

from __future__ import annotations

from services.diagnose import triage
from services.diagnose.diagnose import diagnose
from services.jobs.lifecycle import create_job
from services.measure.configs import CpuConfig
from services.models import Finding, Job, Run, RunKind, TriageStatus
from services.thresholds import Thresholds


def waiting_job(session, project: str = "octo/demo") -> Job:
    """A job whose runs wait 1.5 s on 0.03 s of CPU: one off_cpu_wait finding."""
    job = create_job(
        session,
        project=project,
        command=["python3", "steady.py"],
        configs=[CpuConfig(label="cpuset=0", cpuset=(0,))],
        executor="local",
        workdir=None,
        repeat=5,
        timeout_s=None,
    )
    for repetition in range(1, 6):
        session.add(
            Run(
                config=job.configs[0],
                kind=RunKind.timing,
                repetition=repetition,
                wall_s=1.5 + repetition * 0.001,
                user_s=0.02,
                sys_s=0.01,
                max_rss_kb=10_000,
                voluntary_ctx_switches=5,
                involuntary_ctx_switches=0,
                exit_code=0,
            )
        )
    session.flush()
    return job


def the_finding(session, job: Job) -> Finding:
    [found] = [f for f in diagnose(session, job, Thresholds()) if f.kind == "off_cpu_wait"]
    return found


def test_muting_an_older_occurrence_carries_to_the_next_job(db_session):
    first = the_finding(db_session, waiting_job(db_session))
    second = the_finding(db_session, waiting_job(db_session))
    assert first.fingerprint == second.fingerprint and second.status is TriageStatus.new

    triage.triage(db_session, first, "ana", status="muted", note="known: the fixture sleeps", fields={"status", "note"})
    assert second.status is TriageStatus.muted and second.note == "known: the fixture sleeps"

    third = the_finding(db_session, waiting_job(db_session))
    assert third.status is TriageStatus.muted and third.note == "known: the fixture sleeps"


def test_a_decision_stays_in_its_project(db_session):
    ours = the_finding(db_session, waiting_job(db_session, "octo/demo"))
    theirs = the_finding(db_session, waiting_job(db_session, "other/project"))
    triage.triage(db_session, ours, "ana", status="acknowledged", fields={"status"})
    assert ours.status is TriageStatus.acknowledged and theirs.status is TriageStatus.new
