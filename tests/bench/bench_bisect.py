"""The service's bisect on a real repository: is each culprit named, and at what cost.

One git repository of 16 commits (tests/support/bisect_history.py
``make_two_change_history``): commit 6 (index 5) makes ``test_slow`` 2x slower (its sleep
doubled, 0.1 s to 0.2 s); commit 12 (index 11) makes ``test_handoff`` CPU-sensitive (its
round trips go through an echo thread while a thread crunches, examples/handoff.py's
pattern: next to nothing on one core, a switch interval a round trip on two; before, the
same round trips in one thread); ``test_steady`` never changes. Through the service (the
API in-process on SQLite, the embedded worker running each job, the local executor),
one job at a time:

- 5 bisect jobs of test_slow over the whole range in ``cpuset=0``;
- 5 bisect jobs of test_handoff over the whole range in ``cpuset=0-1``, where its change shows;
- 1 bisect job of test_steady over the whole range in ``cpuset=0``: no culprit.

Per test: the culprit named right in k of 5 jobs (target 5 of 5); the runs per job
(median, min and max), against what Pinpoint's search may take here (the ends and
ceil(log2(15)) = 4 midpoints, 6 commits, each to at most the rule's 8 looks: 48 runs) and
against measuring every commit to the first look that can decide (16 x 5 = 80 runs); the
wall time per job, from the request to the answer, with the median job's cost line. For
the range with no change its verdict and runs. Every run a job took must be stored with
its job and commit, as many as its result and its progress count.

    .venv/bin/python -m tests.bench.run --only bisect [--quick]

Not in the quick smoke run (11 jobs of about 30 runs each, a few minutes); run with
``--quick`` by hand it makes 2 jobs per test.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from flask.testing import FlaskClient
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from cli.service import in_process_dispatcher
from cli.wsgi import create_app
from services import migrate
from services.accounts.tokens import create_token
from services.db import make_engine
from services.github.repositories import register_repository
from services.jobs.bisect import first_deciding_look
from services.jobs.dispatch import InProcessDispatcher
from services.measure.confirm import rule_of
from services.models import JobConfig, Run
from services.settings import Settings
from tests.bench.common import BenchError, scratch_dir
from tests.bench.figures import Figure
from tests.support.bisect_history import make_two_change_history

COMMITS = 16
SLOWER_FROM = 5  # commit 6 of 16 doubles test_slow's sleep
HANDOFF_FROM = 11  # commit 12 of 16 hands test_handoff's round trips off between threads
JOBS = 5
PROJECT = "octo/bisect-bench"
COMMAND = [sys.executable, "-m", "pytest", "-q", "test_work.py"]
JOB_TIMEOUT_S = 600


@dataclass(frozen=True)
class Case:
    test: str  # the function in test_work.py
    config: str
    culprit: int | None  # the index of the commit that changed it; None: nothing did
    jobs: int


@dataclass
class Bisected:
    """One bisect job's answer, as the API gave it, and what the database holds of it."""

    job_id: int
    status: str
    error: str | None
    result: dict | None
    stored_runs: int
    runs_done: int
    wall_s: float  # from the request to the answer

    @property
    def runs(self) -> int:
        return len(self.result["runs"]) if self.result else 0


@dataclass
class Service:
    client: FlaskClient
    token: str
    session_factory: sessionmaker[Session]
    shas: list[str] = field(default_factory=list)

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def bisect(self, case: Case) -> Bisected:
        body = {
            "project": PROJECT,
            "test": f"test_work.py::{case.test}",
            "config": case.config,
            "good": self.shas[0],
            "bad": "main",
            "command": COMMAND,
            "executor": "local",
        }
        started = time.monotonic()
        response = self.client.post("/api/v1/bisects", json=body, headers=self._headers())
        if response.status_code != 202:
            raise BenchError(f"POST /api/v1/bisects answered {response.status_code}: {response.get_json()}")
        job_id = response.get_json()["job_id"]
        deadline = started + JOB_TIMEOUT_S
        while True:
            job = self.client.get(f"/api/v1/jobs/{job_id}", headers=self._headers()).get_json()
            if job["status"] in ("done", "failed", "cancelled"):
                break
            if time.monotonic() > deadline:
                raise BenchError(f"bisect job {job_id} did not end in {JOB_TIMEOUT_S} s: {job['progress']}")
            time.sleep(0.1)
        wall_s = time.monotonic() - started
        with self.session_factory() as session:
            stored = len(session.scalars(select(Run.id).join(JobConfig).where(JobConfig.job_id == job_id)).all())
        return Bisected(
            job_id,
            job["status"],
            job.get("error"),
            job["bisect"]["result"],
            stored,
            (job.get("progress") or {}).get("runs_done", 0),
            wall_s,
        )


def _service(scratch: Path, repo: Path) -> tuple[Service, Settings, Engine, InProcessDispatcher]:
    """The app as `lagtrace serve` makes it without a broker (its jobs run in a thread of
    this process), with ``repo`` registered as PROJECT and a token of PROJECT's."""
    settings = Settings(
        database_url=f"sqlite:///{scratch / 'lagtrace.db'}",
        work_dir=scratch / "work",
        artifact_dir=scratch / "artifacts",
        allow_file_repositories=True,
        # The runs are timed on the host: this deployment trusts its submitters with local.
        allowed_executors=["local"],
    )
    migrate.upgrade(settings)
    engine = make_engine(settings)
    dispatcher, session_factory = in_process_dispatcher(settings, engine)
    dispatcher.start()
    app = create_app(settings, dispatcher, engine)
    with session_factory() as session:
        register_repository(session, settings, project=PROJECT, full_name=PROJECT, url=f"file://{repo}")
        token = create_token(session, PROJECT)
        session.commit()
    return Service(app.test_client(), token, session_factory), settings, engine, dispatcher


def _pinpoint_runs(commits: int, looks: int) -> int:
    """The runs Pinpoint's search may take on a range with one culprit: the two ends and
    one midpoint a halving until the culprit's pair are neighbours, each commit measured
    to at most the rule's ``looks`` runs."""
    return (2 + math.ceil(math.log2(commits - 1))) * looks


def _times(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def _progress(message: str) -> None:
    print(f"bisect: {message}", file=sys.stderr, flush=True)


def _case_figures(case: Case, jobs: list[Bisected], shas: list[str], bound: int, every: int) -> list[Figure]:
    assert case.culprit is not None
    right = [
        job
        for job in jobs
        if job.result
        and job.result["verdict"] == "culprit"
        and job.result["culprit"] == shas[case.culprit]
        and job.result["direction"] == "slower"
    ]
    wrong = [
        f"job {job.job_id}: {job.status} {job.result['verdict'] if job.result else job.error}"
        + (f" {job.result['culprit_subject']}" if job.result and job.result.get("culprit_subject") else "")
        for job in jobs
        if job not in right
    ]
    runs = [job.runs for job in jobs]
    walls = [job.wall_s for job in jobs]
    median_runs = statistics.median(runs)
    # The job whose wall time is the median (the lower of the two middle ones).
    middle = sorted(jobs, key=lambda job: job.wall_s)[(len(jobs) - 1) // 2]
    ratios = [f"{job.result['ratio']:.2f}x" for job in right if job.result and job.result.get("ratio")]
    where = f"{case.test}, {case.config}"
    return [
        Figure(
            f"culprit named, {where}",
            len(right),
            f"of {len(jobs)}",
            target=f"{len(jobs)} of {len(jobs)}",
            met=len(right) == len(jobs),
            n=len(jobs),
            note=f"change {case.culprit} (commit {case.culprit + 1} of {COMMITS}); culprit over parent "
            + (", ".join(ratios) or "-")
            + (f"; wrong: {'; '.join(wrong)}" if wrong else ""),
        ),
        Figure(
            f"runs per job, {where}",
            median_runs,
            "runs",
            target=f"<= {bound} runs",
            met=max(runs) <= bound,
            n=len(jobs),
            note=f"median; min {min(runs)}, max {max(runs)}; Pinpoint's search: at most {bound}",
        ),
        Figure(
            f"every commit to the first deciding look / runs per job, {where}",
            every / median_runs if median_runs else math.inf,
            "x",
            n=len(jobs),
            note=f"{every} runs / median {median_runs:g}",
        ),
        Figure(
            f"wall time per job, {where}",
            statistics.median(walls),
            "s",
            n=len(jobs),
            note=f"median, request to answer; min {min(walls):.1f} s, max {max(walls):.1f} s; "
            f"median job: {middle.result['cost']['says'] if middle.result else middle.error}",
        ),
    ]


def run(quick: bool = False) -> dict[str, object]:
    jobs = 2 if quick else JOBS
    cases = [
        Case("test_slow", "cpuset=0", SLOWER_FROM, jobs),
        Case("test_handoff", "cpuset=0-1", HANDOFF_FROM, jobs),
        Case("test_steady", "cpuset=0", None, 1),
    ]
    done: dict[str, list[Bisected]] = {}
    with scratch_dir("bisect") as scratch:
        repo = scratch / "repo"
        shas = make_two_change_history(repo, COMMITS, SLOWER_FROM, HANDOFF_FROM)
        service, settings, engine, dispatcher = _service(scratch, repo)
        service.shas = shas
        # The rule the jobs judge by: the server's thresholds.
        rule = rule_of(settings.thresholds)
        bound = _pinpoint_runs(COMMITS, rule.looks)
        every = COMMITS * first_deciding_look(rule)
        try:
            for case in cases:
                done[case.test] = []
                for number in range(case.jobs):
                    job = service.bisect(case)
                    done[case.test].append(job)
                    result = job.result or {}
                    named = result.get("culprit")
                    _progress(
                        f"{case.test} in {case.config}, job {number + 1}/{case.jobs}: {job.status}, "
                        f"{result.get('verdict', job.error)}"
                        + (f" change {shas.index(named)} ({_times(result.get('ratio'))})" if named in shas else "")
                        + f"; {result.get('cost', {}).get('says', '-')}; {job.wall_s:.1f} s end to end; "
                        f"{job.stored_runs} runs stored"
                    )
        finally:
            dispatcher.stop(timeout=60)
            engine.dispose()
    figures: list[Figure] = []
    for case in cases[:2]:
        figures += _case_figures(case, done[case.test], shas, bound, every)
    [steady] = done["test_steady"]
    verdict = steady.result["verdict"] if steady.result else steady.status
    figures.append(
        Figure(
            "range with no change: runs, test_steady, cpuset=0",
            steady.runs,
            "runs",
            target="no_culprit",
            met=verdict == "no_culprit",
            n=1,
            note=f"verdict {verdict}: {steady.result['reason'] if steady.result else steady.error}; "
            f"{steady.wall_s:.1f} s end to end",
        )
    )
    every_job = [job for jobs_of in done.values() for job in jobs_of]
    unrecorded = [
        f"job {job.job_id}: {job.stored_runs} stored, {job.runs} in its result, {job.runs_done} in its progress"
        for job in every_job
        if not (job.stored_runs == job.runs == job.runs_done)
    ]
    figures.append(
        Figure(
            "runs recorded / runs taken",
            sum(job.stored_runs for job in every_job) / max(1, sum(job.runs for job in every_job)),
            "x",
            target="1 in every job",
            met=not unrecorded and all(job.status == "done" for job in every_job),
            n=len(every_job),
            note="; ".join(unrecorded[:3])
            or f"{sum(job.stored_runs for job in every_job)} runs in {len(every_job)} jobs",
        )
    )
    return {
        "figures": figures,
        "commits": COMMITS,
        "culprits": {"test_slow": SLOWER_FROM, "test_handoff": HANDOFF_FROM},
        "pinpoint_runs": bound,
        "every_commit_runs": every,
        "jobs": {
            test: [
                {
                    "job_id": job.job_id,
                    "status": job.status,
                    "verdict": job.result["verdict"] if job.result else None,
                    "culprit_index": shas.index(job.result["culprit"])
                    if job.result and job.result["culprit"] in shas
                    else None,
                    "ratio": job.result["ratio"] if job.result else None,
                    "runs": job.runs,
                    "stored_runs": job.stored_runs,
                    "wall_s": round(job.wall_s, 2),
                    "cost": job.result["cost"]["says"] if job.result else None,
                    # Each pair's last judgement: "good-bad: verdict on runs each" by index.
                    "pairs": [
                        f"{shas.index(pair['good'])}-{shas.index(pair['bad'])}: {pair['verdict']} "
                        f"({_times(pair['ratio'])}) on {pair['runs']} runs each"
                        for pair in job.result["pairs"]
                    ]
                    if job.result
                    else [],
                    "medians_s": {
                        str(shas.index(commit["sha"])): round(commit["median_s"], 4) for commit in job.result["commits"]
                    }
                    if job.result
                    else {},
                }
                for job in jobs_of
            ]
            for test, jobs_of in done.items()
        },
    }
