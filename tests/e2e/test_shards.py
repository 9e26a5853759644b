"""Shards across workers (docs/guides/service.md#shards-across-workers) through the whole service: the API, PostgreSQL, Redis
and two Celery workers, each given its own CPU (LAGTRACE_WORKER_CPUS) and its own work
directory (so its node lock is its own), screening a synthetic suite
(tests/bench/bench_suites.py) split in two shards.

    flock /tmp/lagtrace-cpu.lock pytest tests/e2e/test_shards.py
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from sqlalchemy import create_engine, func, select

from services.models import JobConfig, JobShard, JobTask, Run, RunKind
from tests.bench.bench_suites import build_suite
from tests.conftest import REPO
from tests.e2e.test_service import REDIS_DATABASES, Stack
from tests.service_support import GitHubServer
from tests.support.hidden_waits import POLLS, READS_BYTES, hidden_suite
from tests.support.pull_requests import TARGET, make_pull_request, pull_request_payload

FAST_LEASES = {
    "LAGTRACE_STEP_LEASE_S": "10",
    "LAGTRACE_HEARTBEAT_INTERVAL_S": "2",
    "LAGTRACE_RECONCILE_INTERVAL_S": "3",
    "LAGTRACE_ALLOWED_EXECUTORS": "docker,local",
    "LAGTRACE_SHARDS": "2",
    "LAGTRACE_SHARD_MIN_S": "0",
}
COMMAND = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "."]
# What a worker with one CPU of its own can measure: that core, and half of it.
CONFIGS = ("cpuset=0", "cpus=0.5")


class WorkerStack(Stack):
    """The e2e stack with ``workers`` workers, each on a CPU of its own (worker i on CPU i)
    with its own work directory; only the first runs the beat."""

    def start(self) -> WorkerStack:
        assert self.cli("migrate").returncode == 0
        self.token = self.cli("token", "create", "--project", "octo/demo").stdout.strip()
        logs = []
        for index in range(self.workers):
            own = {"LAGTRACE_WORKER_CPUS": str(index), "LAGTRACE_WORK_DIR": str(self.base / f"work{index}")}
            logs.append(
                self.spawn_with(own, f"worker{index}", "worker", "--loglevel=INFO", *(["--beat"] * (index == 0)))
            )
        self.spawn("api", "serve", "--port", str(self.port))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if all("ready." in log.read_text() for log in logs) and self.ready():
                return self
            time.sleep(0.2)
        raise AssertionError(f"the stack did not come up:\n{self.logs()}")

    def spawn_with(self, extra: dict[str, str], name: str, *args: str) -> Path:
        log = self.base / f"{name}.log"
        process = subprocess.Popen(
            [sys.executable, "-m", "cli.main", *args],
            cwd=REPO,
            env={**self.env, **extra},
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes.append(process)
        return log

    def query(self, statement):
        engine = create_engine(self.database_url)
        try:
            with engine.connect() as connection:
                return connection.execute(statement).all()
        finally:
            engine.dispose()

    def submit(self, url: str, configs: tuple[str, ...] = CONFIGS, evidence: list[str] | None = None) -> int:
        body = {
            "repository": {"url": url},
            "command": COMMAND,
            "configs": list(configs),
            "repeat": 5,
            "executor": "local",
            **({"evidence": evidence} if evidence is not None else {}),
        }
        status, job = self.request(
            "POST", "/api/v1/jobs", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        assert status == 201, job
        return job["id"]

    def job(self, job_id: int) -> dict:
        status, job = self.request("GET", f"/api/v1/jobs/{job_id}")
        assert status == 200, job
        return job


@contextlib.contextmanager
def worker_stack(
    database_url: str, broker_url: str, base: Path, workers: int, **settings: str
) -> Iterator[WorkerStack]:
    """A running stack of ``workers`` workers on a database and Redis database of its own."""
    base.mkdir(parents=True, exist_ok=True)
    github = GitHubServer().start()
    running = WorkerStack(base, database_url, broker_url, github, workers=workers, **{**FAST_LEASES, **settings})
    try:
        yield running.start()
    finally:
        running.stop()
        github.stop()
        redis.Redis.from_url(broker_url).flushdb()


@pytest.fixture
def stack(postgres_url, redis_url, tmp_path):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("two workers on CPUs of their own need two CPUs")
    broker_url = f"{redis_url.rsplit('/', 1)[0]}/{next(REDIS_DATABASES)}"
    with worker_stack(postgres_url, broker_url, tmp_path / "stack", 2) as running:
        yield running


def suite_repository(path: Path, seconds: float) -> str:
    """A git repository of the synthetic suite (healthy tests and two planted ones)."""
    build_suite(path, seconds)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(path)]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "suite"], check=True)
    return f"file://{path}"


def wait_final(stack: WorkerStack, job_id: int, timeout_s: float = 300) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = stack.job(job_id)
        if job["status"] in ("done", "failed", "cancelled"):
            return job
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} did not finish\n{stack.logs()}")


def shard_rows(stack: WorkerStack, job_id: int) -> list:
    return stack.query(
        select(JobShard.index, JobTask.state, JobTask.attempts, JobTask.worker)
        .join(
            JobTask,
            (JobTask.job_id == JobShard.job_id) & (JobTask.name == func.concat("screen:shard-", JobShard.index)),
        )
        .where(JobShard.job_id == job_id)
        .order_by(JobShard.index)
    )


def shard_runs(stack: WorkerStack, job_id: int) -> dict[int | None, int]:
    return dict(
        stack.query(
            select(Run.shard, func.count())
            .join(JobConfig, Run.config_id == JobConfig.id)
            .where(JobConfig.job_id == job_id, Run.kind != RunKind.evidence)
            .group_by(Run.shard)
        )
    )


def test_a_suite_is_screened_in_shards_on_both_workers_into_one_report(stack, tmp_path):
    job_id = stack.submit(suite_repository(tmp_path / "suite", 3.0), evidence=[])
    job = wait_final(stack, job_id)
    assert job["status"] == "done", f"{job['error']}\n{stack.logs()}"
    # Both shards in the job's progress, each screened by a different worker.
    shards = job["progress"]["shards"]
    assert [s["index"] for s in shards] == [1, 2], shards
    assert all(s["state"] == "done" and s["runs"] > 0 and s["tests"] >= 20 for s in shards), shards
    workers = {s["worker"] for s in shards}
    assert len(workers) == 2, f"one worker ran every shard: {workers}"
    # Every run of the screen belongs to a shard; each shard ran every configuration.
    runs = shard_runs(stack, job_id)
    assert None not in runs and set(runs) == {1, 2}, runs
    per_config = stack.query(
        select(Run.shard, JobConfig.label, func.count())
        .join(JobConfig, Run.config_id == JobConfig.id)
        .where(JobConfig.job_id == job_id, Run.kind == RunKind.survey)
        .group_by(Run.shard, JobConfig.label)
    )
    assert sorted((shard, label) for shard, label, _ in per_config) == [
        (1, "cpus=0.5"),
        (1, "cpuset=0"),
        (2, "cpus=0.5"),
        (2, "cpuset=0"),
    ], per_config
    # One report: every test of the suite in it once, the survey over both shards.
    report = job["report"]
    assert report is not None
    survey = report["survey"]
    assert survey["tests"] == sum(s["tests"] for s in shards), (survey, shards)
    assert any("2 shards" in note for note in report["notes"]), report["notes"]
    print("notes:", report["notes"], "findings:", [(f["kind"], f["test"], f["severity"]) for f in report["findings"]])
    print(f"\njob {job_id}: shards {[(s['index'], s['tests'], s['runs']) for s in shards]}, survey {survey['tests']}")


# Two files of a suite, one for each shard: fillers, and a test only a tracer sees in each.
HIDDEN = {"test_a.py": hidden_suite(21, POLLS), "test_b.py": hidden_suite(21, READS_BYTES)}


def test_each_shard_takes_its_own_census_on_its_node_and_the_drill_names_what_it_found(stack, tmp_path):
    suite = tmp_path / "hidden"
    suite.mkdir()
    for name, body in HIDDEN.items():
        (suite / name).write_text(body)
    (suite / "pytest.ini").write_text("[pytest]\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(suite)]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "suite"], check=True)
    job_id = stack.submit(f"file://{suite}", configs=("cpuset=0",))  # one: the census needs no pair
    job = wait_final(stack, job_id, timeout_s=420)
    assert job["status"] == "done", f"{job['error']}\n{stack.logs()}"
    report = job["report"]
    # One census per shard, each a run of that shard (its worker's node), over its own tests.
    censuses = [e for e in report["evidence"] if e["kind"] == "census"]
    assert len(censuses) == 2, (report["notes"], [e["kind"] for e in report["evidence"]])
    census_runs = stack.query(
        select(Run.shard)
        .join(JobConfig, Run.config_id == JobConfig.id)
        .where(JobConfig.job_id == job_id, Run.probe == "census")
        .order_by(Run.shard)
    )
    assert [shard for (shard,) in census_runs] == [1, 2], census_runs
    suspects = sorted(test for e in censuses for test in e["content"]["suspects"])
    assert suspects == ["test_a.py::test_polls", "test_b.py::test_reads_a_byte_at_a_time"], censuses
    # The finish step drilled both, on whichever worker, and the rules name them.
    found = {(f["kind"], f["test"]) for f in report["findings"] if f["severity"] in ("medium", "high")}
    assert ("busy_polling", "test_a.py::test_polls") in found, report["findings"]
    assert ("tiny_reads", "test_b.py::test_reads_a_byte_at_a_time") in found, report["findings"]
    print(f"\njob {job_id}: censuses {[(e['config'], e['content']['suspects']) for e in censuses]}")


def test_a_worker_killed_during_its_shard_loses_only_that_shard(stack, tmp_path):
    job_id = stack.submit(suite_repository(tmp_path / "suite", 6.0), evidence=[])
    beat_worker, other = stack.processes[0], stack.processes[1]
    # Wait until the worker without the beat runs a shard and has stored a run of it.
    deadline = time.monotonic() + 180
    victim = None
    while victim is None:
        assert time.monotonic() < deadline, f"no shard ran on the second worker\n{stack.logs()}"
        for index, state, _, worker in shard_rows(stack, job_id):
            pid = int(worker.split("/", 1)[1].split()[0]) if worker else None
            ours = state.value == "running" and pid is not None and parent_of(pid) == other.pid
            if ours and shard_runs(stack, job_id).get(index, 0) >= 1:
                victim = index
        time.sleep(0.2)
    os.killpg(other.pid, signal.SIGKILL)
    other.wait()
    job = wait_final(stack, job_id, timeout_s=300)
    assert job["status"] == "done", f"{job['error']}\n{stack.logs()}"
    rows = {index: (state.value, attempts, worker) for index, state, attempts, worker in shard_rows(stack, job_id)}
    state, attempts, worker = rows[victim]
    assert state == "done" and attempts == 2, rows
    assert parent_of_name(worker) == beat_worker.pid, rows  # retried on the worker still alive
    # The other shard ran once; the killed attempt's runs were dropped, not merged.
    survivor = 3 - victim
    assert rows[survivor][1] == 1, rows
    surveys = stack.query(
        select(Run.shard, func.count())
        .join(JobConfig, Run.config_id == JobConfig.id)
        .where(JobConfig.job_id == job_id, Run.kind == RunKind.survey)
        .group_by(Run.shard)
    )
    assert dict(surveys) == {1: 2, 2: 2}, surveys
    assert job["report"] is not None and job["report"]["survey"]["tests"] > 0
    print(f"\nshard {victim} killed on its worker, retried: {rows}")


def parent_of(pid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return next((int(line.split()[1]) for line in status.splitlines() if line.startswith("PPid:")), None)


def parent_of_name(worker: str) -> int | None:
    return parent_of(int(worker.split("/", 1)[1].split()[0]))


# Asserts the head's 5x `regressed`: a latency verdict, so it runs in the serial tier (beside
# the parallel tier's load the comparison answered `too_noisy`, as its neighbour note said).
@pytest.mark.latency
def test_a_pull_request_is_screened_in_shards_each_against_the_base_tests_it_has(stack, tmp_path):
    # 40 fillers (a file heavier than a shard's share: split into node ids), the target the
    # head slows 5x, and a file the head adds, which the base commit has not.
    yml = "command: python3 -m pytest tests\nconfigs: [cpuset=0]\nrepeat: 5\nevidence: []\n"
    repository = make_pull_request(tmp_path / "repo", yml, base_s=0.03, head_s=0.15, filler=40)
    path = tmp_path / "repo"
    (path / "tests" / "test_added.py").write_text("def test_new_one():\n    pass\n\n\ndef test_new_two():\n    pass\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(path)]
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "two tests more"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    repository.head = head
    stack.register(repository.url)
    status, accepted = stack.deliver(pull_request_payload(repository), "pr-shards", "pull_request")
    assert status == 202, accepted
    job = wait_final(stack, accepted["job_id"], timeout_s=420)
    assert job["status"] == "done", f"{job['error']}\n{stack.logs()}"
    shards = job["progress"]["shards"]
    assert len(shards) == 2 and len({s["worker"] for s in shards}) == 2, shards
    # Each shard compared its own tests with the base on its own node: base runs in both.
    base_runs = stack.query(
        select(Run.shard, func.count())
        .join(JobConfig, Run.config_id == JobConfig.id)
        .where(JobConfig.job_id == job["id"], Run.kind.in_([RunKind.base_warmup, RunKind.base_focus, RunKind.base]))
        .group_by(Run.shard)
    )
    assert sorted(shard for shard, _ in base_runs) == [1, 2], base_runs
    report = job["report"]
    verdicts = {row["test"]: row["verdict"] for row in report["base_comparison"]["tests"] if row["test"]}
    assert verdicts.get(TARGET) == "regressed", (verdicts, report["notes"])
    # The base has no such tests: each is "new", with nothing to compare it with.
    assert {test: verdict for test, verdict in verdicts.items() if "test_added" in test} == {
        "tests/test_added.py::test_new_one": "new",
        "tests/test_added.py::test_new_two": "new",
    }, verdicts
    assert report["survey"]["tests"] == 44, report["survey"]  # 40 + 2 + 2
    print(f"\njob {job['id']}: shards {[(s['index'], s['tests']) for s in shards]}, base runs {base_runs}")
