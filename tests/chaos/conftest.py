"""Fault injection on the whole service: real Celery workers, Redis, PostgreSQL and Docker.

The suite owns its PostgreSQL cluster and its Redis (their own ports), since it stops
and restarts them; the shared ones on 54329/63799 are never touched. Leases, heartbeats
and the reconciler run on short settings (CHAOS_SETTINGS) so that each fault recovers
in seconds; the bound asserted is the same formula as production's
(Settings.recovery_bound_s: lease + reconcile interval), plus the start-up of a worker.

`make chaos` (LAGTRACE_CHAOS_DEFAULTS=1) runs the same faults once with the shipped
defaults instead, and prints each fault's recovery time at the end of the session.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest
import redis
from sqlalchemy import create_engine, func, select, text

from services.measure.executors.docker_guards import INSTALLATION_LABEL, JOB_LABEL, RUN_DIR
from services.models import Finding, JobConfig, JobTask, Run, RunKind
from services.settings import Settings
from tests.conftest import require
from tests.e2e.test_service import Stack, free_port
from tests.service_support import GitHubServer, delivery_headers, make_repository, push_payload

SHORT_SETTINGS = {
    "LAGTRACE_STEP_LEASE_S": "10",
    "LAGTRACE_HEARTBEAT_INTERVAL_S": "2",
    "LAGTRACE_RECONCILE_INTERVAL_S": "3",
    "LAGTRACE_DATABASE_RETRY_S": "1",
    "LAGTRACE_DOCKER_ENGINE_WAIT_S": "60",
    "LAGTRACE_RUN_TIMEOUT_S": "60",
    "LAGTRACE_RUN_TIMEOUT_MAX_S": "120",
}
SHIPPED_DEFAULTS = os.environ.get("LAGTRACE_CHAOS_DEFAULTS") == "1"
# With the shipped defaults each of these is set to its default explicitly: neither the
# e2e stack's own reconcile interval (5 s) nor the caller's environment counts.
CHAOS_SETTINGS = (
    {name: str(Settings.model_fields[name[len("LAGTRACE_") :].lower()].default) for name in SHORT_SETTINGS}
    if SHIPPED_DEFAULTS
    else SHORT_SETTINGS
)
# The settings the stacks' workers run with.
EFFECTIVE = Settings(**{name[len("LAGTRACE_") :].lower(): float(value) for name, value in CHAOS_SETTINGS.items()})
BOUND_S = EFFECTIVE.recovery_bound_s
# A Celery worker takes a few seconds to start (imports, broker, beat); the reconciler's
# message then waits for the worker's single slot.
START_UP_S = 15.0
FINAL = ("done", "failed", "cancelled")
# One run of a no-op in one container: a job that reaches its end in seconds.
QUICK_YML = "command: [python3, -c, pass]\nconfigs: [cpuset=0]\nrepeat: 1\nexecutor: docker\nevidence: []\n"
# Four timed runs of two seconds each in one container configuration: long enough to be
# killed mid-screen, short enough to keep the suite within minutes.
SLOW_YML = (
    'command: [python3, -c, "import time; time.sleep(2)"]\n'
    "configs: [cpuset=0]\nrepeat: 4\nexecutor: docker\nevidence: []\n"
)


def _pg_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: [int(x) for x in p.parent.name.split(".")])
    require(bool(found), "no PostgreSQL server binaries under /usr/lib/postgresql")
    return found[-1]


class PrivatePostgres:
    """A PostgreSQL cluster of the chaos suite's own, which it may stop and start."""

    def __init__(self):
        self.bin = _pg_bin()
        # Under /var/tmp: the server's user must reach it (pytest's tmp is private to root).
        self.dir = Path(tempfile.mkdtemp(prefix="lagtrace-chaos-pg-", dir="/var/tmp"))
        self.dir.chmod(0o755)
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        command = [str(self.bin / args[0]), *args[1:]]
        if os.geteuid() == 0:  # the server refuses to run as root
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, cwd="/", capture_output=True, timeout=120)

    def init(self) -> PrivatePostgres:
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres")
        self._run("initdb", "-D", str(self.dir / "data"), "-A", "trust", "-U", "postgres")
        return self.start()

    def start(self) -> PrivatePostgres:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100"
        self._run(
            "pg_ctl", "-D", str(self.dir / "data"), "-l", str(self.dir / "server.log"), "-w", "-o", options, "start"
        )
        return self

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.dir / "data"), "-m", "fast", "-w", "stop")

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class PrivateRedis:
    """A Redis without persistence: a restart loses every queued message (docs/guides/reliability.md)."""

    def __init__(self, base: Path):
        require(shutil.which("redis-server") is not None, "redis-server is not installed")
        self.base, self.port = base, free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> PrivateRedis:
        self.process = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no"],
            cwd=self.base,
            stdout=(self.base / "redis.log").open("a"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.2):
                return self
            time.sleep(0.1)
        raise AssertionError("the chaos suite's Redis did not start")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()  # no chance to save anything: a crash
            self.process.wait()


@pytest.fixture(scope="session")
def private_postgres():
    server = PrivatePostgres()
    try:
        yield server.init()
    finally:
        server.destroy()


@pytest.fixture(scope="session")
def private_redis(tmp_path_factory):
    server = PrivateRedis(tmp_path_factory.mktemp("redis")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def engine_client():
    try:
        client = docker.from_env(timeout=30)
        client.ping()
        client.images.get(Settings().docker_image)
    except Exception as exc:  # any failure: no usable engine or image here
        require(False, f"the chaos suite needs Docker and the runner image: {exc}")
    yield client
    client.close()


class ChaosStack(Stack):
    """The e2e stack on the private servers, with one installation id of its own."""

    installation: str

    def spawn_worker(self, name: str, *, beat: bool = True, env: dict[str, str] | None = None) -> subprocess.Popen:
        log = self.spawn(name, "worker", "--loglevel=INFO", *(["--beat"] if beat else []), env=env)
        process = self.processes[-1]
        deadline = time.monotonic() + 60
        while "ready." not in log.read_text():
            assert time.monotonic() < deadline and process.poll() is None, f"worker {name} did not start\n{self.logs()}"
            time.sleep(0.2)
        return process

    def worker(self, index: int = 0) -> subprocess.Popen:
        return [p for p in self.processes if "worker" in " ".join(map(str, p.args))][index]

    def query(self, statement):
        engine = create_engine(self.database_url)
        try:
            with engine.connect() as connection:
                return connection.execute(statement).all()
        finally:
            engine.dispose()

    def status(self, job_id: int) -> str | None:
        try:
            status, job = self.request("GET", f"/api/v1/jobs/{job_id}")
        except OSError:
            return None
        return job["status"] if status == 200 else None

    def wait_final(self, job_id: int, timeout_s: float) -> tuple[str, float]:
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if (status := self.status(job_id)) in FINAL:
                return status, time.monotonic() - started
            time.sleep(0.3)
        raise AssertionError(
            f"job {job_id} reached no final state in {timeout_s:.0f} s\n{self.ledger(job_id)}\n{self.logs()}"
        )

    def ledger(self, job_id: int) -> list:
        return self.query(
            select(JobTask.name, JobTask.state, JobTask.attempts, JobTask.worker).where(JobTask.job_id == job_id)
        )

    def running_containers(self, job_id: int | None = None) -> list:
        client = docker.from_env(timeout=30)
        try:
            labels = [f"{INSTALLATION_LABEL}={self.installation}"]
            if job_id is not None:
                labels.append(f"{JOB_LABEL}={job_id}")
            for _ in range(20):
                try:
                    return client.containers.list(all=True, filters={"label": labels})
                except docker.errors.NotFound:
                    # Removed between the engine's list and the SDK's look at each one
                    # (a run ending, a short look into the image): list again.
                    time.sleep(0.1)
            return client.containers.list(all=True, filters={"label": labels})
        finally:
            client.close()

    def wait_for_run(self, job_id: int, timeout_s: float = 90) -> None:
        """Until a measured run of the job runs (a container with the run directory mounted:
        not the dependency install's, nor a short look into the image, which carry the label too)."""
        deadline = time.monotonic() + timeout_s
        while not [
            c
            for c in self.running_containers(job_id)
            if c.status == "running" and RUN_DIR in [m.get("Destination") for m in c.attrs.get("Mounts") or []]
        ]:
            assert time.monotonic() < deadline, f"no run container of job {job_id} started\n{self.logs()}"
            time.sleep(0.2)

    def push(self, repository: tuple[str, str]) -> int:
        url, head = repository
        self.register(url)  # deliveries are accepted only for a registered repository (its secret)
        payload = push_payload(url, head)
        # Each real push carries its own time; an identical body under a new delivery id is a replay.
        payload["repository"]["pushed_at"] = time.time_ns()
        body = json.dumps(payload).encode()
        status, answer = self.request(
            "POST", "/api/v1/webhooks/github", body, delivery_headers(body, f"chaos-{uuid.uuid4().hex}")
        )
        assert status == 202, answer
        return answer["job_id"]

    def wait_relaunched(
        self, job_id: int, step: str, before: int, timeout_s: float, since: float, by: subprocess.Popen | None = None
    ) -> float:
        """Seconds from ``since`` (the fault) until ``step`` is claimed by an attempt after
        ``before`` (re-leased), or by a process of worker ``by`` (a step given back
        uncounted claims the same attempt number again): a new worker's start-up counts, as
        it does in production."""
        started = since
        while time.monotonic() - started < timeout_s:
            attempts = {name: (state, tries, who) for name, state, tries, who in self.ledger(job_id)}
            state, tries, who = attempts.get(step, (None, 0, None))
            holder = re.search(r"/(\d+)", who or "")
            ours = by is not None and holder is not None and int(holder.group(1)) in children(by.pid)
            if (tries > before or ours) and state is not None and state.value in ("running", "done"):
                return time.monotonic() - started
            time.sleep(0.2)
        raise AssertionError(f"{step} of job {job_id} was not re-leased in {timeout_s:.0f} s\n{self.logs()}")

    def assert_effects_once(self, job_id: int, *, repeat: int, from_github: bool = True) -> None:
        """One set of timed runs, no finding twice, one check run, no container left."""
        # The screen may stop a configuration early (Thresholds.min_repetitions), never run
        # a repetition twice: a killed attempt's runs are dropped before the next one starts.
        runs = self.query(
            select(JobConfig.label, func.count(Run.id), func.count(func.distinct(Run.repetition)))
            .join(Run, Run.config_id == JobConfig.id)
            .where(JobConfig.job_id == job_id, Run.kind == RunKind.timing)
            .group_by(JobConfig.label)
        )
        assert runs, f"job {job_id} stored no timed run"
        assert all(count == distinct <= repeat for _, count, distinct in runs), f"(config, runs, repetitions): {runs}"
        findings = self.query(
            select(Finding.kind, Finding.config_label, Finding.test_id).where(Finding.job_id == job_id)
        )
        assert len(findings) == len(set(findings)), f"a finding was stored twice: {findings}"
        if from_github:
            created = [
                r for r in self.github.check_runs() if r.method == "POST" and r.body.get("external_id") == str(job_id)
            ]
            assert len(created) == 1, f"{len(created)} check runs created for job {job_id}"
        deadline = time.monotonic() + 15
        while left := self.running_containers(job_id):
            assert time.monotonic() < deadline, f"containers left over: {[c.name for c in left]}"
            time.sleep(0.5)


@contextlib.contextmanager
def chaos_stack(
    postgres: PrivatePostgres, redis_server: PrivateRedis, base: Path, *, workers: int = 1, **settings: str
) -> Iterator[ChaosStack]:
    name = f"lagtrace_chaos_{uuid.uuid4().hex[:10]}"
    # Pre-ping: the PostgreSQL test restarts the server under this pool.
    admin = create_engine(postgres.url, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    base.mkdir(parents=True, exist_ok=True)
    github = GitHubServer().start()
    installation = f"chaos-{uuid.uuid4().hex[:12]}"
    stack = ChaosStack(
        base,
        f"{postgres.url.rsplit('/', 1)[0]}/{name}",
        redis_server.url,
        github,
        workers,
        **{**CHAOS_SETTINGS, "LAGTRACE_INSTALLATION_ID": installation, **settings},
    )
    stack.installation = installation
    try:
        yield stack.start()
    finally:
        stack.stop()  # and removes the containers of its installation
        github.stop()
        redis.Redis.from_url(redis_server.url).flushall()
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def stack(private_postgres, private_redis, engine_client, tmp_path) -> Iterator[ChaosStack]:
    with chaos_stack(private_postgres, private_redis, tmp_path / "stack") as running:
        yield running


@pytest.fixture
def repository_with(tmp_path) -> Callable[[str], tuple[str, str]]:
    made = iter(range(100))
    return lambda yml: make_repository(tmp_path / f"repo{next(made)}", yml)


def kill_group(process: subprocess.Popen, sig: signal.Signals) -> float:
    """Send ``sig`` to the process group (the worker and its pool); the moment it was sent."""
    os.killpg(process.pid, sig)
    return time.monotonic()


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


# (fault, what recovered, seconds after the fault), listed at the end of the session.
RECOVERIES: list[tuple[str, str, float]] = []


def record(fault: str, what: str, seconds: float) -> None:
    RECOVERIES.append((fault, what, seconds))
    print(f"\n{fault}: {what} {seconds:.1f} s after the fault")


def report(fault: str, recovery_s: float, final_s: float) -> None:
    record(fault, f"step re-leased (bound {BOUND_S:.0f} s + {START_UP_S:.0f} s start-up)", recovery_s)
    record(fault, "job final", final_s)


def pytest_terminal_summary(terminalreporter) -> None:
    if not RECOVERIES:
        return
    mode = "the shipped defaults" if SHIPPED_DEFAULTS else "the chaos suite's short settings"
    terminalreporter.section(
        f"recovery times with {mode} (lease {EFFECTIVE.step_lease_s:g} s, heartbeat "
        f"{EFFECTIVE.heartbeat_interval_s:g} s, reconcile {EFFECTIVE.reconcile_interval_s:g} s)"
    )
    for fault, what, seconds in RECOVERIES:
        terminalreporter.write_line(f"{seconds:7.1f} s  {fault}: {what}")
