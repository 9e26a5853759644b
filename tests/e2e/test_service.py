"""The whole service as separate processes: PostgreSQL, Redis, a Celery worker (with its
beat), the API server, a local GitHub, and `lagtrace submit` as a user runs it."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import docker
import pytest
import redis
from sqlalchemy import create_engine, func, select, text

from services.measure.executors.docker_guards import INSTALLATION_LABEL
from services.models import Job, JobTask, WebhookDelivery
from services.settings import Settings
from tests.conftest import REPO
from tests.service_support import SECRET, GitHubServer, delivery_headers, make_repository, push_payload

# Database 0 is left to whoever else uses the test Redis; 1-15 go round per stack.
REDIS_DATABASES = itertools.cycle(range(1, 16))
HANDOFF_YML = "command: python3 handoff.py 200 4\nconfigs: [cpuset=0, cpuset=0-1]\nrepeat: 5\n"


def group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs (zombies, waiting for a reaper, do not)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if fields[0] != "Z" and int(fields[2]) == pgid:
                return True
    return False


def wait_for_group_gone(pgid: int, timeout_s: float = 20) -> None:
    """Until no process of the group is left (a pool's children outlive their leader)."""
    for sig in (None, signal.SIGKILL):
        if sig is not None and group_alive(pgid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, sig)
        deadline = time.monotonic() + timeout_s
        while group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Stack:
    def __init__(
        self, base: Path, database_url: str, broker_url: str, github: GitHubServer, workers: int = 1, **settings: str
    ):
        self.base, self.database_url, self.github = base, database_url, github
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "LAGTRACE_DATABASE_URL": database_url,
            "LAGTRACE_BROKER_URL": broker_url,
            "LAGTRACE_WORK_DIR": str(base / "work"),
            "LAGTRACE_ALLOW_FILE_REPOSITORIES": "true",
            "LAGTRACE_GITHUB_API_URL": github.url,
            "LAGTRACE_GITHUB_TOKEN": "e2e-token",
            "LAGTRACE_GITHUB_WEBHOOK_SECRET": SECRET,
            "LAGTRACE_PUBLIC_URL": self.url,
            "LAGTRACE_RECONCILE_INTERVAL_S": "5",
            **settings,
        }
        self.workers = workers
        self.processes: list[subprocess.Popen] = []

    def cli(self, *args: str, timeout: float = 300, input: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "cli.main", *args],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
        )

    def register(self, url: str, full_name: str = "octo/demo") -> None:
        done = self.cli("repo", "register", full_name, "--url", url, "--secret-stdin", input=SECRET + "\n")
        assert done.returncode == 0, done.stderr

    def spawn(self, name: str, *args: str, env: dict[str, str] | None = None) -> Path:
        log = self.base / f"{name}.log"
        process = subprocess.Popen(
            [sys.executable, "-m", "cli.main", *args],
            cwd=REPO,
            env={**self.env, **(env or {})},
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes.append(process)
        return log

    def start(self) -> Stack:
        assert self.cli("migrate").returncode == 0
        self.token = self.cli("token", "create", "--project", "octo/demo").stdout.strip()
        # One beat for the cluster: only the first worker runs the reconciler.
        worker_logs = [
            self.spawn(f"worker{i}", "worker", "--loglevel=INFO", *(["--beat"] if i == 0 else []))
            for i in range(self.workers)
        ]
        self.spawn("api", "serve", "--port", str(self.port))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if all("ready." in log.read_text() for log in worker_logs) and self.ready():
                return self
            time.sleep(0.2)
        raise AssertionError(f"the stack did not come up:\n{self.logs()}")

    def ready(self) -> bool:
        try:
            return self.request("GET", "/readyz")[0] == 200
        except OSError:
            return False

    def logs(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text()[-4000:]}" for log in self.base.glob("*.log"))

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            wait_for_group_gone(process.pid)
        # A worker stopped in the middle of a job leaves its containers to the reaper of
        # its installation's next start, which never comes for a stack's own database.
        settings = Settings(
            database_url=self.database_url, installation_id=self.env.get("LAGTRACE_INSTALLATION_ID") or None
        )
        with (
            contextlib.suppress(docker.errors.DockerException),
            contextlib.closing(docker.from_env(timeout=30)) as client,
        ):
            for container in client.containers.list(
                all=True, filters={"label": f"{INSTALLATION_LABEL}={settings.installation}"}
            ):
                container.remove(force=True)

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
        request = urllib.request.Request(
            self.url + path,
            data=body,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", **(headers or {})},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def wait(self, job_id: int, timeout_s: float = 300) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status, job = self.request("GET", f"/api/v1/jobs/{job_id}")
            assert status == 200, job
            if job["report"] is not None:
                return job
            time.sleep(0.2)
        raise AssertionError(f"job {job_id} did not finish: {job}\n{self.logs()}")

    def deliver(self, payload: dict, delivery: str, event: str = "push", secret: str = SECRET):
        body = json.dumps(payload).encode()
        return self.request("POST", "/api/v1/webhooks/github", body, delivery_headers(body, delivery, event, secret))

    def tasks(self, job_id: int) -> list[tuple]:
        """The job's ledger steps as stored: what a failure message needs."""
        engine = create_engine(self.database_url)
        try:
            with engine.connect() as connection:
                query = select(JobTask.name, JobTask.state, JobTask.attempts, JobTask.error, JobTask.updated_at)
                return [tuple(row) for row in connection.execute(query.where(JobTask.job_id == job_id))]
        finally:
            engine.dispose()

    def count(self, model) -> int:
        engine = create_engine(self.database_url)
        try:
            with engine.connect() as connection:
                return connection.scalar(select(func.count()).select_from(model))
        finally:
            engine.dispose()


@contextlib.contextmanager
def running_stack(postgres_server_url: str, redis_url: str, base: Path, **options):
    name = f"lagtrace_e2e_{uuid.uuid4().hex[:10]}"
    admin = create_engine(postgres_server_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    # A Redis database of its own, so another stack's workers never take our messages.
    broker_url = f"{redis_url.rsplit('/', 1)[0]}/{next(REDIS_DATABASES)}"
    base.mkdir(parents=True, exist_ok=True)
    github = GitHubServer().start()
    running = Stack(base, f"{postgres_server_url.rsplit('/', 1)[0]}/{name}", broker_url, github, **options)
    try:
        yield running.start()
    finally:
        running.stop()
        github.stop()
        redis.Redis.from_url(broker_url).flushdb()
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="module")
def stack(postgres_server_url, redis_url, tmp_path_factory):
    with running_stack(postgres_server_url, redis_url, tmp_path_factory.mktemp("stack")) as running:
        yield running


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    return make_repository(tmp_path_factory.mktemp("repo") / "demo", HANDOFF_YML)


@pytest.fixture(scope="module")
def timing_repository(tmp_path_factory):
    """The hand-off with the timing screen only: its cpu_sensitivity verdict is the screen's,
    and a drill (strace, py-spy, gdb) in each of two jobs would add 40 s to the serial tier."""
    return make_repository(tmp_path_factory.mktemp("repo") / "demo", HANDOFF_YML + "evidence: []\n")


def latency_note(report: dict) -> str:
    return "; ".join(report["notes"]) or "(no note: the machine was quiet)"


def test_a_trivial_job_round_trip(stack, repository):
    url, _ = repository
    body = json.dumps(
        {"repository": {"url": url}, "command": ["python3", "-c", "pass"], "configs": ["cpuset=0"], "repeat": 1}
    ).encode()
    started = time.perf_counter()
    status, job = stack.request("POST", "/api/v1/jobs", body, {"Content-Type": "application/json"})
    assert status == 201, job
    done = stack.wait(job["id"])
    elapsed = time.perf_counter() - started
    assert done["status"] == "done", done["error"]
    assert done["progress"]["configs"][0]["worker"].startswith(socket.gethostname() + "/")
    print(f"API job round trip (clone, plan, one run, diagnose; {done['executor']} executor): {elapsed:.2f} s")
    assert elapsed < 30


@pytest.mark.latency
def test_submit_over_http_finds_the_cpu_sensitive_hand_off(stack, repository, tmp_path):
    out = tmp_path / "report.json"
    directory = Path(repository[0].removeprefix("file://"))
    done = stack.cli(
        "submit",
        "--url",
        stack.url,
        "--token",
        stack.token,
        "--dir",
        str(directory),
        "--config",
        "cpuset=0",
        "--config",
        "cpuset=0-1",
        "--repeat",
        "5",
        # The verdict is the timing screen's: a drill would add 20 s to the serial tier.
        "--evidence",
        "none",
        "--json",
        str(out),
        "--poll",
        "0.3",
        "--",
        "python3",
        "handoff.py",
        "200",
        "4",  # four clients: one loses its two-core cost beside a neighbour on CPU 0 (docs/guides/service.md, Quickstart)
    )
    assert done.returncode == 0, done.stderr + stack.logs()
    assert "lagtrace: job" in done.stderr and "runs" in done.stderr  # progress went to stderr
    report = json.loads(out.read_text())
    kinds = [f["kind"] for f in report["findings"]]
    assert "cpu_sensitivity" in kinds, f"{kinds}; {latency_note(report)}"
    assert "cpu_sensitivity" in done.stdout
    status, listed = stack.request("GET", f"/api/v1/findings?job_id={report['job']['id']}&kind=cpu_sensitivity")
    assert status == 200 and listed["findings"][0]["config"] == "cpuset=0-1"


def test_submit_exits_2_with_the_message_on_a_bad_request(stack):
    done = stack.cli(
        "submit",
        "--url",
        stack.url,
        "--token",
        stack.token,
        "--repo",
        "https://example.com/r.git",
        "--config",
        "cpuset=nope",
        "--",
        "python3",
        "x.py",
    )
    assert done.returncode == 2 and "configs" in done.stderr and "cpuset" in done.stderr
    unknown_probe = stack.cli("submit", "--url", stack.url, "--token", stack.token, "--evidence", "xray", "--", "x")
    assert unknown_probe.returncode == 2 and "xray" in unknown_probe.stderr
    unauthorised = stack.cli(
        "submit", "--url", stack.url, "--token", "wrong", "--repo", "https://example.com/r.git", "--", "python3", "x.py"
    )
    assert unauthorised.returncode == 2 and "token" in unauthorised.stderr


def test_unsigned_and_repeated_deliveries(stack, repository):
    url, head = repository
    jobs_before = stack.count(Job)
    for secret in ("wrong-secret", None):
        body = json.dumps(push_payload(url, head)).encode()
        headers = delivery_headers(body, "e2e-unsigned", secret=secret or SECRET)
        if secret is None:
            del headers["X-Hub-Signature-256"]
        status, answer = stack.request("POST", "/api/v1/webhooks/github", body, headers)
        assert status == 401, answer
    assert stack.count(Job) == jobs_before and stack.count(WebhookDelivery) == 0

    ping = {"zen": "Design for failure."}
    assert stack.deliver(ping, "e2e-ping", "ping")[1]["outcome"] == "pong"
    again = stack.deliver(ping, "e2e-ping", "ping")
    assert again[1]["duplicate"] is True and stack.count(WebhookDelivery) == 1


@pytest.mark.latency
def test_a_signed_push_reports_a_check_run_and_a_rerequest_reruns(stack, timing_repository):
    url, head = timing_repository
    stack.register(url)
    status, first = stack.deliver(push_payload(url, head), "e2e-push")
    assert status == 202, first
    status, second = stack.deliver(push_payload(url, head), "e2e-push")
    assert status == 200 and second["duplicate"] and second["job_id"] == first["job_id"]

    job = stack.wait(first["job_id"])
    assert job["status"] == "done", job["error"]
    assert job["configs"] == ["cpuset=0", "cpuset=0-1"]
    mine = [r for r in stack.github.check_runs() if r.body.get("external_id") == str(job["id"])]
    # A GitHub call that fails goes back to the ledger for 30 s (services/github/notify.py):
    # the check run completes within one such retry.
    deadline = time.monotonic() + 75
    while not any(r.body.get("status") == "completed" for r in mine) and time.monotonic() < deadline:
        time.sleep(0.2)
        mine = [r for r in stack.github.check_runs() if r.body.get("external_id") == str(job["id"])]
    completed_runs = [r for r in mine if r.body.get("status") == "completed"]
    assert len(completed_runs) == 1, f"{stack.tasks(job['id'])}\n{[r.body for r in mine]}\n{stack.logs()}"
    [completed] = completed_runs
    assert completed.method == "PATCH" and completed.headers["Authorization"] == "Bearer e2e-token"
    assert completed.body["head_sha"] == head
    assert completed.body["details_url"] == f"{stack.url}/jobs/{job['id']}"
    assert "cpu_sensitivity" in completed.body["output"]["summary"], latency_note(job["report"])

    check_run_id = int(completed.path.rsplit("/", 1)[1])
    rerequest = {
        "action": "rerequested",
        "check_run": {"id": check_run_id, "head_sha": head},
        "repository": {"full_name": "octo/demo", "clone_url": url},
    }
    status, rerun = stack.deliver(rerequest, "e2e-rerequest", "check_run")
    assert status == 202, rerun
    child = stack.wait(rerun["job_id"])
    assert child["parent_id"] == job["id"] and child["status"] == "done"
    assert child["comparison"]["parent_id"] == job["id"]
    assert [c["label"] for c in child["comparison"]["configs"]] == ["cpuset=0", "cpuset=0-1"]


# Each run stamps its job, the CPUs it was pinned to (its configuration), and when it
# started and ended; the runs are then checked for order and overlap.
STAMP = (
    "import os, sys, time; started = time.time(); time.sleep(float(sys.argv[3])); "
    "cpus = ','.join(map(str, sorted(os.sched_getaffinity(0)))); "
    "open(sys.argv[1], 'a').write(f'{sys.argv[2]} {cpus} {started} {time.time()}\\n')"
)


def submit_stamped(stack: Stack, url: str, stamps: Path, tag: str, configs: list[str], run_s: float = 0.3) -> int:
    # Local executor: the runs write their stamps to a host file a container could not reach.
    body = {
        "repository": {"url": url},
        "command": ["python3", "-c", STAMP, str(stamps), tag, str(run_s)],
        "configs": configs,
        "repeat": 3,
        "evidence": [],
        "executor": "local",
    }
    status, job = stack.request("POST", "/api/v1/jobs", json.dumps(body).encode(), {"Content-Type": "application/json"})
    assert status == 201, job
    return job["id"]


# These tests count the command's runs round by round. Beside the parallel tier's load a
# timed run may be disturbed and taken again (Thresholds.retake_foreign_cpus), one run
# more: retakes have tests of their own (tests/cli/test_run.py), so they are off here.
COUNTED_RUNS = {"LAGTRACE_THRESHOLDS__RETAKE_PER_RUN": "0"}


def stamped_runs(stamps: Path) -> list[tuple[str, str, float, float]]:
    """(job tag, CPUs, start, end) in the order the runs started."""
    runs = [
        (tag, cpus, float(start), float(end))
        for tag, cpus, start, end in map(str.split, stamps.read_text().splitlines())
    ]
    return sorted(runs, key=lambda run: run[2])


def overlapping(spans: list[tuple[float, float]]) -> int:
    return sum(1 for i, a in enumerate(spans) for b in spans[i + 1 :] if a[0] < b[1] and b[0] < a[1])


def test_a_celery_worker_screens_a_job_interleaved_on_one_node(postgres_server_url, redis_url, repository, tmp_path):
    stamps = tmp_path / "stamps"
    # The stamps are host files: this deployment trusts its submitters with the local executor.
    options = {"LAGTRACE_ALLOWED_EXECUTORS": "docker,local", **COUNTED_RUNS}
    with running_stack(postgres_server_url, redis_url, tmp_path / "stack", **options) as stack:
        job = stack.wait(submit_stamped(stack, repository[0], stamps, "a", ["cpuset=0", "cpuset=1"]))
    assert job["status"] == "done", job["error"]
    workers = {config["worker"] for config in job["progress"]["configs"]}
    assert len(workers) == 1, job["progress"]  # one screen step, one node, for every configuration
    # Interleaved as `lagtrace run` does: each round (the warm-up, then three timing rounds)
    # runs every configuration once, in that round's shuffled order.
    cpus = [cpus for _, cpus, _, _ in stamped_runs(stamps)]
    assert len(cpus) == 2 * (1 + 3)
    assert all(sorted(cpus[i : i + 2]) == ["0", "1"] for i in range(0, len(cpus), 2)), cpus


@pytest.mark.parametrize(
    "packing",
    [
        pytest.param(False, id="one-screen-per-node"),
        # Overlap needs both workers' runs at once: beside other work the second job started
        # after the first had ended (no overlap, the test failed). Serially, in the latency tier.
        pytest.param(True, id="packed-on-disjoint-cores", marks=pytest.mark.latency),
    ],
)
def test_two_jobs_share_a_node_only_when_packing_on_disjoint_cores(
    postgres_server_url, redis_url, tmp_path, repository, packing
):
    options = {"LAGTRACE_PACK_DISJOINT_CORES": "true"} if packing else {}
    # The stamps are host files: this deployment trusts its submitters with the local executor.
    options["LAGTRACE_ALLOWED_EXECUTORS"] = "docker,local"
    options.update(COUNTED_RUNS)
    with running_stack(postgres_server_url, redis_url, tmp_path / "stack", workers=2, **options) as two_workers:
        stamps = tmp_path / "stamps"
        # Runs of 1.5 s: each job measures for about 6 s, so two jobs whose prepare steps
        # ended a few seconds apart still measure at once (with 0.3 s runs, one rehearsal's
        # second job began its runs after the first had ended: no overlap to see).
        ids = [
            submit_stamped(two_workers, repository[0], stamps, tag, [config], run_s=1.5)
            for tag, config in (("a", "cpuset=0"), ("b", "cpuset=1"))
        ]
        jobs = [two_workers.wait(job_id) for job_id in ids]
    for job in jobs:
        assert job["status"] == "done", job["error"]
    runs = stamped_runs(stamps)
    assert len(runs) == 2 * (1 + 3)  # per job: one warm-up run, then the three timing runs
    spans = {tag: [(start, end) for t, _, start, end in runs if t == tag] for tag in ("a", "b")}
    across = overlapping(spans["a"] + spans["b"]) - overlapping(spans["a"]) - overlapping(spans["b"])
    assert overlapping(spans["a"]) == 0 and overlapping(spans["b"]) == 0  # a job's own runs never overlap
    packing_noted = all(any("PACK_DISJOINT_CORES" in note for note in job["report"]["notes"]) for job in jobs)
    if packing:
        assert across > 0 and packing_noted
    else:
        assert across == 0 and not packing_noted


@pytest.mark.latency
def test_worker_with_the_docker_executor_finds_gil_contention_at_the_stall(stack, repository, tmp_path):
    """The stall snapshot through the service, in a container: the in-container timer
    freezes the hand-off at the default threshold, and gdb finds threads waiting for the GIL."""
    require_docker()
    out = tmp_path / "report.json"
    directory = Path(repository[0].removeprefix("file://"))
    done = stack.cli(
        "submit",
        "--url",
        stack.url,
        "--token",
        stack.token,
        "--dir",
        str(directory),
        "--executor",
        "docker",
        "--config",
        "cpuset=0",
        "--config",
        "cpuset=0-1",
        "--repeat",
        "3",
        "--evidence",
        "core",
        "--json",
        str(out),
        "--poll",
        "0.3",
        "--",
        "python3",
        "handoff.py",
        # 600 round trips: about 4 s on two cores against 0.1 s pinned to one (80x apart at
        # 2,000 here), so the default threshold (10x the fast median) falls early in the run.
        "600",
        "2",
        timeout=600,
    )
    assert done.returncode == 0, done.stderr + stack.logs()
    report = json.loads(out.read_text())
    assert report["executor"] == "docker"
    stalls = [e for e in report["evidence"] if e["kind"] == "stall" and e["content"]["status"] == "ok"]
    assert stalls and stalls[0]["config"] == "cpuset=0-1", [e["content"] for e in report["evidence"]]
    assert stalls[0]["content"]["not_captured"] == [], stalls[0]["content"]
    kinds = [f["kind"] for f in report["findings"]]
    assert "gil_contention" in kinds, f"{kinds}; {latency_note(report)}"
    assert "stall" in kinds
    # The cause proven by its knob in the container, through the worker, on PostgreSQL:
    # the experiment is read back on the findings the rules made after it.
    [story] = [d for d in report["diagnoses"] if d["test"] is None]
    assert story["cause"] is not None and story["cause"]["kind"] == "gil_contention", story
    assert story["knob_confirmed"] is True, story
    assert story["knob"].startswith("confirmed: with sys.setswitchinterval(0.0005) at cpuset=0-1"), story


def require_docker() -> None:
    from services.measure.executors import docker_engine
    from services.settings import Settings
    from tests.conftest import require

    problem = docker_engine.unavailable_reason(Settings().docker_image)
    require(problem is None, f"no usable Docker engine: {problem}")
