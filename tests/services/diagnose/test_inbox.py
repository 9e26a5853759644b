"""The inbox's order and titles over stored findings, on both databases."""

from __future__ import annotations

import datetime as dt

from services.diagnose import inbox
from services.diagnose.diagnose import command_title, short_command
from services.diagnose.findings import fingerprint
from services.jobs.lifecycle import get_or_create_project
from services.models import Finding, Job, JobStatus

T0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)


def _job(session, day: int) -> Job:
    job = Job(
        project=get_or_create_project(session, "demo"),
        status=JobStatus.done,
        source="web",
        command=["python3", "-m", "pytest", "tests"],
        executor="docker",
        repeat=5,
        created_at=T0 + dt.timedelta(days=day),
    )
    session.add(job)
    session.flush()
    return job


def _finding(session, job: Job, kind: str, severity: str, test_id: str, ratio: float | None = None) -> Finding:
    made = Finding(
        job=job,
        kind=kind,
        severity=severity,
        title=f"{kind} in {test_id}",
        detail="-",
        test_id=test_id,
        metrics={"ratio": ratio} if ratio else {},
        evidence_ids=[],
        fingerprint=fingerprint("demo", kind, test_id),
        created_at=job.created_at,
    )
    session.add(made)
    return made


def test_the_inbox_lists_the_most_severe_first_then_the_most_impact(db_session):
    # Three LOW problems seen in every one of four jobs (impact 4, one of them 30x: 120),
    # a HIGH gil_contention and a HIGH futex_storm seen once (impact 1): by impact alone
    # every LOW came first.
    jobs = [_job(db_session, day) for day in range(4)]
    for job in jobs:
        _finding(db_session, job, "hot_path", "low", "t::hot", ratio=30.0)
        _finding(db_session, job, "latency_flaky", "low", "t::a")
        _finding(db_session, job, "tiny_reads", "low", "t::b")
    _finding(db_session, jobs[-1], "gil_contention", "high", "t::gil")
    _finding(db_session, jobs[-1], "futex_storm", "high", "t::futex")
    _finding(db_session, jobs[-1], "busy_polling", "medium", "t::poll")
    db_session.flush()
    inbox.refresh_groups(db_session, {f.fingerprint for job in jobs for f in job.findings})
    project = jobs[0].project_id
    listed = [(g.latest.severity, g.latest.kind) for g in inbox.inbox(db_session, [project])]
    assert listed == [
        ("high", "futex_storm"),  # equal impact: the newest first
        ("high", "gil_contention"),
        ("medium", "busy_polling"),
        ("low", "hot_path"),  # 30x in 4 jobs: the most impact among the LOWs
        ("low", "tiny_reads"),
        ("low", "latency_flaky"),
    ]
    # A page is cut in that order, and the filtered path (a triage state) orders the same.
    assert [g.latest.kind for g in inbox.inbox(db_session, [project], limit=2)] == ["futex_storm", "gil_contention"]
    assert [g.latest.kind for g in inbox.inbox(db_session, [project], status="new", offset=3, limit=1)] == ["hot_path"]


def test_a_finding_about_the_whole_command_names_the_command():
    title = "The command varies widely between runs with cpuset=0-1"
    one = command_title(title, ["/usr/bin/python3", "-m", "pytest", "tests/api"])
    other = command_title(title, ["/usr/bin/python3", "-m", "pytest", "tests/web"])
    assert one == "The command `python3 -m pytest tests/api` varies widely between runs with cpuset=0-1"
    assert one != other
    assert command_title("Imports take 0.50 s of a 0.80 s run (62%)", ["python3", "app.py"]).endswith(
        "(`python3 app.py`)"
    )
    long = short_command(["pytest", "-q", *(f"tests/test_module_{i}.py" for i in range(10))])
    assert len(long) <= 48 and long.startswith("pytest -q tests/") and "..." in long
