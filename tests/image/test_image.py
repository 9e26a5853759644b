"""The service image, as built offline by .ci/build-service-image.sh from the top-level
Dockerfile: the same entrypoint and roles the Dockerfile declares, and every role run
against the test PostgreSQL, Redis and Docker engine, taking one job from an API request
to its report."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import docker
import pytest
from docker.errors import DockerException, ImageNotFound

from tests.conftest import EXAMPLES, REPO, provisioned, require

DOCKERFILE = REPO / "Dockerfile"
ROLES = {
    "serve": "Serve the API",
    "worker": "Run a Celery worker",
    "beat": "Run only the periodic reconciler's scheduler",
    "migrate": "Bring the database at LAGTRACE_DATABASE_URL to the newest schema",
}


@pytest.fixture(scope="module")
def engine():
    try:
        client = docker.from_env(timeout=60)
        client.ping()
    except DockerException as exc:
        require(False, f"no Docker engine answers ({exc})")
    yield client
    client.close()


@pytest.fixture(scope="module")
def image(engine) -> str:
    name = provisioned("image", "LAGTRACE_TEST_SERVICE_IMAGE")
    try:
        engine.images.get(name)
    except ImageNotFound:
        require(False, f"the service image {name} is missing (.ci/build-service-image.sh builds it)")
    return str(name)


def final_stage(dockerfile: Path) -> dict[str, str]:
    """The last stage's instructions (the last of each kind wins, as in the builder)."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    stages = re.split(r"^FROM .*$", text, flags=re.MULTILINE)
    found: dict[str, str] = {}
    for line in stages[-1].splitlines():
        keyword, _, rest = line.strip().partition(" ")
        if keyword in ("ENTRYPOINT", "CMD", "USER", "WORKDIR", "EXPOSE"):
            found[keyword] = rest.strip()
    return found


def test_the_offline_build_has_the_dockerfiles_entrypoint_user_and_ports(engine, image):
    config = engine.images.get(image).attrs["Config"]
    declared = final_stage(DOCKERFILE)
    assert config["Entrypoint"] == json.loads(declared["ENTRYPOINT"])
    assert config["Cmd"] == json.loads(declared["CMD"])
    assert config["User"] == declared["USER"]
    assert config["WorkingDir"] == declared["WORKDIR"]
    assert set(config["ExposedPorts"]) == {f"{declared['EXPOSE']}/tcp"}
    # The offline path, on the debootstrapped base (not a pulled debian:trixie-slim).
    assert config["Labels"]["org.lagtrace.build"] == "offline"
    assert re.search(r"^ARG BASE=debian:trixie-slim$", DOCKERFILE.read_text(), re.MULTILINE)


def _run(image: str, *args: str, docker_args: tuple[str, ...] = (), timeout: float = 120):
    return subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--read-only", "--tmpfs", "/tmp", *docker_args, image, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize("role", sorted(ROLES))
def test_each_role_is_its_lagtrace_command(image, role):
    done = _run(image, role, "--help")
    assert done.returncode == 0, done.stderr
    assert ROLES[role] in " ".join(done.stdout.split())


def test_the_image_runs_as_a_non_root_user_with_signals_forwarded_by_tini(image):
    script = "id -u; id -g; cat /proc/1/comm; command -v py-spy; debian=$(cat /etc/debian_version); echo ${debian%%.*}"
    # The entrypoint is `tini -- lagtrace`; a shell replaces lagtrace, tini stays PID 1.
    done = _run(image, "--", "sh", "-c", script, docker_args=("--entrypoint", "/usr/bin/tini"))
    assert done.returncode == 0, done.stderr
    uid, gid, pid1, py_spy, debian = done.stdout.split()
    assert (uid, gid) == ("10001", "10001")
    assert pid1 == "tini"
    # Outside the venv, so the chart can hand its directory to the dind engine.
    assert py_spy == "/opt/lagtrace/tools/py-spy"
    assert debian == "13"  # trixie, as debian:trixie-slim
    # Uploaded archives are unpacked with tarfile's "data" filter (not in bookworm's 3.11.2).
    filters = _run(
        image, "-c", "import tarfile; print(tarfile.data_filter.__name__)", docker_args=("--entrypoint", "python3")
    )
    assert filters.stdout.strip() == "data_filter", filters.stderr


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Stack:
    """The four roles as containers on the host network (this engine has no bridge)."""

    def __init__(self, engine, image: str, database_url: str, broker_url: str, shared: Path):
        self.engine, self.image, self.shared = engine, image, shared
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.prefix = f"lagtrace-smoke-{uuid.uuid4().hex[:8]}"
        self.env = {
            "LAGTRACE_DATABASE_URL": database_url,
            "LAGTRACE_BROKER_URL": broker_url,
            "LAGTRACE_PUBLIC_URL": self.url,
            "LAGTRACE_RECONCILE_INTERVAL_S": "5",
            "LAGTRACE_DOCKER_PREPARE_NETWORK": os.environ.get("LAGTRACE_DOCKER_PREPARE_NETWORK", "bridge"),
        }
        self.containers: dict[str, object] = {}

    def run(self, role: str, *args: str, **kwargs):
        """A container as the chart runs it: read-only root, no capabilities, non-root."""
        options = {
            "network_mode": "host",
            "read_only": True,
            # emptyDirs in the chart (fsGroup makes them the image user's); tmpfs here.
            "tmpfs": {
                path: "uid=10001,gid=10001,mode=0755"
                for path in ("/tmp", "/srv/lagtrace/work", "/srv/lagtrace/artifacts")
            },
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "environment": {**self.env, **kwargs.pop("environment", {})},
            "labels": {"lagtrace.smoke": self.prefix},
            **kwargs,
        }
        return self.engine.containers.run(self.image, [role, *args], detach=True, **options)

    def once(self, role: str, *args: str) -> str:
        container = self.run(role, *args, name=f"{self.prefix}-{role}-{uuid.uuid4().hex[:4]}")
        try:
            status = container.wait(timeout=120)
            output = container.logs().decode()
            assert status["StatusCode"] == 0, output
            return container.logs(stdout=True, stderr=False).decode()
        finally:
            container.remove(force=True)

    def start(self) -> Stack:
        self.once("migrate")
        self.token = self.once("token", "create", "--project", "octo/demo").strip()
        socket_gid = os.stat("/var/run/docker.sock").st_gid
        work = self.shared / "work"
        self.containers["worker"] = self.run(
            "worker",
            name=f"{self.prefix}-worker",
            hostname="smoke-worker",
            # The engine resolves bind-mount paths on its own filesystem: the worker's work
            # and run directories, and py-spy (first on PATH), exist at the same paths there.
            volumes={
                str(self.shared): {"bind": str(self.shared), "mode": "rw"},
                "/var/run/docker.sock": {"bind": "/var/run/docker.sock", "mode": "rw"},
            },
            group_add=[str(socket_gid)],
            environment={
                "LAGTRACE_WORK_DIR": str(work),
                "LAGTRACE_ARTIFACT_DIR": str(self.shared / "artifacts"),
                "LAGTRACE_WORKER_HEARTBEAT_FILE": str(work / "heartbeat"),
                "TMPDIR": str(work / "tmp"),
                "LAGTRACE_NODE_NAME": "smoke-node",
                "PATH": f"{self.shared / 'tools'}:/opt/lagtrace/venv/bin:/usr/local/bin:/usr/bin:/bin",
            },
        )
        self.containers["beat"] = self.run("beat", name=f"{self.prefix}-beat")
        self.containers["api"] = self.run(
            "serve",
            name=f"{self.prefix}-api",
            environment={"LAGTRACE_PORT": str(self.port), "LAGTRACE_ARTIFACT_DIR": str(self.shared / "artifacts")},
            volumes={str(self.shared / "artifacts"): {"bind": str(self.shared / "artifacts"), "mode": "rw"}},
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if "ready." in self.logs("worker") and self.http("/readyz")[0] == 200:
                return self
            time.sleep(0.5)
        raise AssertionError(f"the stack did not come up:\n{self.all_logs()}")

    def http(self, path: str) -> tuple[int, dict]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, {}
        except OSError:
            return 0, {}

    def logs(self, role: str) -> str:
        return self.containers[role].logs().decode("utf-8", "replace")

    def all_logs(self) -> str:
        return "\n".join(f"--- {role}\n{self.logs(role)[-4000:]}" for role in self.containers)

    def alive(self, role: str) -> int:
        container = self.containers[role]
        container.reload()
        assert container.status == "running", f"{role} exited:\n{self.logs(role)[-3000:]}"
        return container.exec_run(["lagtrace", "alive", "60"]).exit_code

    def stop(self) -> None:
        for container in self.containers.values():
            try:
                container.remove(force=True)
            except DockerException:
                pass


@pytest.fixture
def shared_dir():
    # Not under pytest's tmp_path (mode 0700 below /tmp/pytest-of-root): the image's user
    # (10001) and the runner's (1000) both need to reach it, at the same path as the host
    # (the engine reads bind-mount sources from its own filesystem).
    path = Path(tempfile.mkdtemp(prefix="lagtrace-smoke-", dir="/srv"))
    path.chmod(0o777)
    for sub in ("work", "artifacts", "tools"):
        (path / sub).mkdir(mode=0o777)
        (path / sub).chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_every_role_takes_a_job_from_api_request_to_report(engine, image, postgres_url, redis_url, shared_dir):
    # py-spy from the image, at a path that is the same for the worker and the engine.
    extract = engine.containers.create(image, ["true"])
    try:
        bits, _ = extract.get_archive("/opt/lagtrace/tools/py-spy")
        subprocess.run(["tar", "-x", "-C", str(shared_dir / "tools")], input=b"".join(bits), check=True)
    finally:
        extract.remove(force=True)
    broker = redis_url.rsplit("/", 1)[0] + "/13"
    project = shared_dir / "project"
    project.mkdir()
    shutil.copy(EXAMPLES / "steady.py", project / "steady.py")
    stack = Stack(engine, image, postgres_url, broker, shared_dir)
    try:
        stack.start()
        assert stack.http("/healthz")[0] == 200
        out = shared_dir / "report.json"
        started = time.perf_counter()
        done = subprocess.run(
            [
                *(sys.executable, "-m", "cli.main", "submit", "--url", stack.url, "--token", stack.token),
                *("--dir", str(project), "--config", "cpuset=0", "--config", "cpuset=0-1", "--repeat", "3"),
                *("--evidence", "pyspy", "--executor", "docker", "--json", str(out), "--poll", "0.5"),
                *("--", "python3", "steady.py"),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        elapsed = time.perf_counter() - started
        assert done.returncode == 0, done.stderr + stack.all_logs()
        report = json.loads(out.read_text())
        job = report["job"]
        print(f"smoke job (2 configurations x 3 runs + a py-spy evidence run, docker executor): {elapsed:.1f} s")
        assert job["status"] == "done", job
        assert report["executor"] == "docker"
        assert {c["label"] for c in report["configs"]} == {"cpuset=0", "cpuset=0-1"}
        for config in report["configs"]:
            assert config["runs"] and all(run["exit_code"] == 0 for run in config["runs"]), config
        assert not report["failed_runs"]
        # The worker in its container ran it, and py-spy reached the run through the engine.
        status, progress = stack_request(stack, f"/api/v1/jobs/{job['id']}")
        assert status == 200
        for config in progress["progress"]["configs"]:
            assert config["worker"].startswith("smoke-worker/") and " on smoke-node (" in config["worker"], config
        evidence_runs = report["evidence_runs"]
        assert {run["probe"] for run in evidence_runs} == {"pyspy"}, evidence_runs
        assert all(run["exit_code"] == 0 for run in evidence_runs), evidence_runs
        assert report["evidence"], "the py-spy run left no evidence"
        # Liveness probes as the chart runs them.
        assert stack.alive("worker") == 0 and stack.alive("beat") == 0
        # SIGTERM through tini: a warm shutdown, exit 0, well within the grace period.
        worker = stack.containers["worker"]
        stopping = time.perf_counter()
        worker.stop(timeout=60)
        stop_s = time.perf_counter() - stopping
        worker.reload()
        assert worker.attrs["State"]["ExitCode"] == 0, stack.logs("worker")[-3000:]
        assert "warm shutdown" in stack.logs("worker").lower()
        assert stop_s < 30, stop_s
        assert not (shared_dir / "work" / "heartbeat").exists()
        print(f"worker warm shutdown after SIGTERM: {stop_s:.1f} s")
    finally:
        stack.stop()
        for leftover in engine.containers.list(all=True, filters={"label": f"lagtrace.smoke={stack.prefix}"}):
            leftover.remove(force=True)


def stack_request(stack: Stack, path: str) -> tuple[int, dict]:
    request = urllib.request.Request(stack.url + path, headers={"Authorization": f"Bearer {stack.token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, json.loads(response.read())
