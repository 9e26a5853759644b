"""A finished hand-off job as the engine stores it: runs per configuration, per-test
durations, evidence as the probes parse it (strace -c, gdb py-bt, py-spy dump and record
with its flame graph in the artifact store, faulthandler) and findings citing it."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from sqlalchemy.orm import Session

from services.diagnose import inbox
from services.diagnose.findings import fingerprint
from services.jobs import pull_requests
from services.jobs.lifecycle import get_or_create_project
from services.measure.artifacts import make_artifact_store
from services.measure.probes import flamegraph
from services.models import Evidence, Finding, Job, JobConfig, JobSource, JobStatus, Run, RunKind, TestResult, utcnow
from services.settings import Settings
from services.thresholds import Thresholds

TEST_SLOW = "tests/test_ws.py::test_two_clients"
TEST_STEADY = "tests/test_ws.py::test_echo"
FRAMES = [
    {"function": "call_soon_threadsafe", "file": "/usr/lib/python3.11/asyncio/base_events.py", "line": 807},
    {"function": "receive", "file": "/app/ws.py", "line": 42},
]


def _timing_runs(config: JobConfig, walls: list[float], slow_test: list[float], kind: RunKind = RunKind.timing) -> None:
    for i, (wall, slow) in enumerate(zip(walls, slow_test, strict=False)):
        run = Run(
            kind=kind,
            repetition=i + 1,
            wall_s=wall,
            user_s=wall * 0.9,
            sys_s=0.05,
            max_rss_kb=30000,
            voluntary_ctx_switches=1200,
            involuntary_ctx_switches=40,
            exit_code=0,
        )
        run.test_results = [
            TestResult(test_id=TEST_SLOW, duration_s=slow, outcome="passed"),
            TestResult(test_id=TEST_STEADY, duration_s=0.010 + i * 0.001, outcome="passed"),
        ]
        config.runs.append(run)


def speedscope_profile() -> dict:
    """A py-spy speedscope recording: three samples of one thread (as py-spy writes it)."""
    return {
        "shared": {
            "frames": [
                {"name": "main", "file": "/app/ws.py", "line": 10},
                {"name": "receive", "file": "/app/ws.py", "line": 42},
                {"name": "call_soon_threadsafe", "file": "base_events.py", "line": 807},
            ]
        },
        "profiles": [
            {
                "name": "MainThread",
                "unit": "seconds",
                "samples": [[0, 1], [0, 1, 2], [0, 1, 2]],
                "weights": [0.01, 0.01, 0.01],
            }
        ],
    }


def flame_graph_file(path: Path) -> Path:
    tree = flamegraph.tree_from_speedscope(speedscope_profile())
    path.write_text(flamegraph.render_svg(tree, "py-spy record, 100 Hz"))
    return path


def store_handoff_job(
    session: Session,
    settings: Settings,
    project: str = "demo",
    created_at: dt.datetime | None = None,
    with_source: bool = True,
) -> Job:
    job = Job(
        project=get_or_create_project(session, project),
        status=JobStatus.done,
        source="web",
        command=["python3", "-m", "pytest", "tests/test_ws.py"],
        executor="docker",
        repeat=5,
        created_at=created_at or utcnow(),
        started_at=utcnow(),
        finished_at=utcnow(),
    )
    one, two = (
        JobConfig(position=0, label="cpuset=0", cpuset="0"),
        JobConfig(position=1, label="cpuset=0-1", cpuset="0-1"),
    )
    job.configs = [one, two]
    session.add(job)
    session.flush()
    if with_source:
        session.add(JobSource(job_id=job.id, kind="git", repository_url="file:///nowhere/demo", commit_sha="ab" * 20))
    _timing_runs(one, [0.30, 0.31, 0.29, 0.32, 0.30], [0.020, 0.022, 0.019, 0.021, 0.020])
    _timing_runs(two, [5.4, 5.1, 5.6, 5.3, 5.5], [1.90, 1.75, 2.05, 1.80, 1.95])
    evidence_run = Run(
        config=two,
        kind=RunKind.evidence,
        repetition=1,
        wall_s=6.0,
        user_s=5.0,
        sys_s=0.4,
        max_rss_kb=30000,
        voluntary_ctx_switches=9000,
        involuntary_ctx_switches=80,
        exit_code=0,
        probe="core",
        test_id=TEST_SLOW,
    )
    session.add(evidence_run)
    session.flush()

    store = make_artifact_store(settings)
    settings.artifact_dir.mkdir(parents=True, exist_ok=True)
    svg = store.put(
        f"job-{job.id}/run-{evidence_run.id}/pyspy-flamegraph.svg",
        flame_graph_file(settings.artifact_dir / "flame.svg"),
        "image/svg+xml",
    )

    profile_path = settings.artifact_dir / "profile.json"
    profile_path.write_text(json.dumps(speedscope_profile()))
    profile = store.put(
        f"job-{job.id}/run-{evidence_run.id}/pyspy-profile.speedscope.json", profile_path, "application/json"
    )

    def evidence(
        kind: str,
        content: dict,
        text: str | None = None,
        artifacts: list | None = None,
        config: JobConfig = two,
    ) -> Evidence:
        entry = Evidence(
            job=job,
            config=config,
            run=evidence_run,
            test_id=TEST_SLOW,
            kind=kind,
            content={"status": "ok", **content},
            text=text,
            artifacts=artifacts or [],
        )
        session.add(entry)
        return entry

    strace = evidence(
        "strace",
        {
            "top": "futex",
            "top_pct_time": 97.6,
            "syscalls": [
                {
                    "name": "futex",
                    "pct_time": 97.6,
                    "seconds": 4.1,
                    "usecs_per_call": 410,
                    "calls": 10000,
                    "errors": 120,
                },
                {"name": "read", "pct_time": 1.4, "seconds": 0.06, "usecs_per_call": 6, "calls": 10500, "errors": 0},
                {
                    "name": "epoll_wait",
                    "pct_time": 1.0,
                    "seconds": 0.04,
                    "usecs_per_call": 40,
                    "calls": 1000,
                    "errors": 0,
                },
            ],
        },
        text="% time     seconds  usecs/call     calls    errors syscall\n 97.60    4.100000 ... futex",
    )
    gdb = evidence(
        "gdb",
        {
            "reader": "gdb",
            "waiting_for_gil": 1,
            "threads": [
                {
                    "id": 1,
                    "lwp": 101,
                    "name": "python3",
                    "current": True,
                    "waiting_for_gil": False,
                    "holds_gil": True,
                    "frames": FRAMES,
                    "native_frames": ["PyEval_EvalFrameDefault"],
                },
                {
                    "id": 2,
                    "lwp": 102,
                    "name": "loop-2",
                    "current": False,
                    "waiting_for_gil": True,
                    "frames": FRAMES[:1],
                    "native_frames": ["take_gil", "PyEval_RestoreThread"],
                },
            ],
        },
        text="Thread 2 ... Waiting for the GIL",
    )
    dump = evidence(
        "pyspy_dump",
        {
            "pid": 7,
            "elapsed_s": 2.1,
            "threads": [
                {
                    "id": 101,
                    "name": "MainThread",
                    "state": "active+gil",
                    "active": True,
                    "owns_gil": True,
                    "frames": FRAMES,
                },
                {
                    "id": 102,
                    "name": "loop-2",
                    "state": "active",
                    "active": True,
                    "owns_gil": False,
                    "frames": FRAMES[:1],
                },
            ],
        },
    )
    faults = evidence(
        "faulthandler",
        {
            "trigger": "stall",
            "threads": [
                {"id": "0x7f01", "current": True, "frames": FRAMES},
                {"id": "0x7f02", "current": False, "frames": FRAMES[:1]},
            ],
        },
    )
    record = evidence(
        "pyspy",
        {
            "rate_hz": 100,
            "idle_included": True,
            "samples": 3,
            "threads": [
                {
                    "name": "MainThread",
                    "samples": 3,
                    "top_frames": [{"frame": "call_soon_threadsafe", "samples": 2, "pct": 66.7}],
                }
            ],
        },
        artifacts=[svg.as_dict(), profile.as_dict()],
    )
    # The drill traces the fast configuration too: the same test pinned to one core
    # barely touches futex (not cited by any finding: it is the baseline).
    evidence(
        "strace",
        {
            "top": "read",
            "top_pct_time": 61.0,
            "syscalls": [
                {"name": "read", "pct_time": 61.0, "seconds": 0.0061, "usecs_per_call": 2, "calls": 3000, "errors": 0},
                {"name": "futex", "pct_time": 4.0, "seconds": 0.0004, "usecs_per_call": 4, "calls": 100, "errors": 0},
            ],
        },
        config=one,
    )
    session.flush()

    def finding(
        kind: str, severity: str, title: str, test_id: str | None, ratio: float | None, cited: list[Evidence]
    ) -> Finding:
        made = Finding(
            job=job,
            kind=kind,
            severity=severity,
            title=title,
            detail=f"{title} (detail)",
            config_label="cpuset=0-1",
            test_id=test_id,
            metrics={"ratio": ratio} if ratio else {},
            evidence_ids=[e.id for e in cited],
            fingerprint=fingerprint(project, kind, test_id or "command"),
            created_at=job.created_at,
        )
        session.add(made)
        return made

    finding(
        "cpu_sensitivity",
        "high",
        f"{TEST_SLOW} is 90.0x slower with cpuset=0-1 than with cpuset=0",
        TEST_SLOW,
        90.0,
        [],
    )
    finding("gil_contention", "high", "threads wait for the GIL at the stall", TEST_SLOW, None, [gdb, dump, faults])
    finding("futex_storm", "medium", "futex holds 97.6 % of syscall time", TEST_SLOW, None, [strace, record])
    session.flush()
    # As the engine's finish sums the job's problems for the inbox (services/jobs/summaries.py).
    inbox.refresh_groups(session, {f.fingerprint for f in job.findings})
    return job


BASE_SHA, HEAD_SHA = "b" * 40, "a" * 40


def store_pull_request_job(session: Session, settings: Settings, project: str = "demo"):
    """A hand-off job from pull request #12, with base runs: on cpuset=0 the slow test took
    4 ms on the base and 20 ms on the head (regressed); on cpuset=0-1 about 1.9 s on both.
    Returns the job and its recorded comparison rows."""
    job = store_handoff_job(session, settings, project=project, with_source=False)
    job.trigger = "pull_request"
    session.add(
        JobSource(
            job_id=job.id,
            kind="git",
            repository_url="https://github.com/octo/demo.git",
            commit_sha=HEAD_SHA,
            github_repository="octo/demo",
            github_head_sha=HEAD_SHA,
            branch="faster-ws",
            base_ref="main",
            base_commit_sha=BASE_SHA,
            pull_request_number=12,
            pull_request_url="https://github.com/octo/demo/pull/12",
        )
    )
    one, two = job.configs
    _timing_runs(one, [0.28, 0.29, 0.28, 0.30, 0.28], [0.004, 0.0042, 0.0038, 0.0041, 0.004], RunKind.base)
    _timing_runs(two, [5.5, 5.2, 5.4, 5.3, 5.6], [1.85, 1.95, 1.80, 2.0, 1.9], RunKind.base)
    session.flush()
    rows = pull_requests.record(session, job, Thresholds())
    inbox.refresh_groups(session, {f.fingerprint for f in job.findings})
    return job, rows
