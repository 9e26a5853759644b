"""A job's progress as the page, the API and `submit` show it."""

from __future__ import annotations

from services.jobs.lifecycle import get_or_create_project
from services.jobs.submit import progress
from services.models import Job, JobConfig, JobStatus, Run, RunKind


def _run(kind: RunKind, repetition: int) -> Run:
    return Run(
        kind=kind,
        repetition=repetition,
        wall_s=0.1,
        user_s=0.1,
        sys_s=0.0,
        max_rss_kb=1,
        voluntary_ctx_switches=1,
        involuntary_ctx_switches=1,
        exit_code=0,
    )


def test_progress_never_counts_past_its_plan(db_session):
    # Three configurations at --repeat 5: the plan said 15. The survey's run, five focused
    # runs and an undecided pair's two more took 21: "screening 21/15".
    job = Job(
        project=get_or_create_project(db_session, "demo"),
        status=JobStatus.running,
        source="cli",
        command=["pytest"],
        executor="local",
        repeat=5,
    )
    job.configs = [JobConfig(position=i, label=label) for i, label in enumerate(("a", "b", "c"))]
    db_session.add(job)
    db_session.flush()
    for config, extra in zip(job.configs, (3, 3, 0), strict=True):
        config.runs = [
            _run(RunKind.survey, 0),
            *(_run(RunKind.focus, r) for r in range(1, 6 + extra - 1)),
        ]
    db_session.flush()
    state = progress(db_session, job)
    assert state["runs_done"] == 8 + 8 + 5 == 21
    assert state["runs_done"] <= state["runs_planned"] == 8 + 8 + 5
    assert [c["runs"] for c in state["configs"]] == [8, 8, 5]
    assert 0 < state["fraction"] <= 1
    # Before the screen added runs the plan is --repeat per configuration.
    for config in job.configs:
        config.runs = config.runs[:2]
    db_session.flush()
    state = progress(db_session, job)
    assert (state["runs_done"], state["runs_planned"]) == (6, 15)
