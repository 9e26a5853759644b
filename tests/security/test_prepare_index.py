"""The designed dependency path (LAGTRACE_DOCKER_PREPARE_NETWORK=index): a repository's
requirements install from the one index the operator named (a real pypiserver here), on a
network where that index is the only thing a prepare container can reach: not the
database, not the broker, not the cloud's metadata service, not the host."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from urllib.parse import urlsplit

import docker
import pytest

from services.measure.executors import prepare_network
from services.measure.executors.docker_prepare import dependency_key
from services.measure.install import plan_install
from services.settings import Settings
from tests.service_support import make_repository
from tests.support import package_index as index_support

package_index = index_support.package_index  # the fixture

# Runs in a container on the network under test: tries each host:port, prints what connected.
PROBE = """
import json, socket, sys
reached = {}
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        reached[target] = "connected"
    except OSError as exc:
        reached[target] = type(exc).__name__
try:
    socket.getaddrinfo("example.com", 80)
    reached["dns:example.com"] = "resolved"
except OSError as exc:
    reached["dns:example.com"] = type(exc).__name__
print(json.dumps(reached))
"""


def _host_port(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}"


def host_addresses() -> list[str]:
    """This machine's own IPv4 addresses, but loopback (where the database and Redis listen)."""
    out = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, check=True).stdout
    return [line.split()[3].split("/")[0] for line in out.splitlines() if " lo " not in line]


@pytest.fixture
def index_settings(package_index):
    installation = f"t-index-{uuid.uuid4().hex[:8]}"
    overrides = {
        "installation_id": installation,
        "docker_prepare_network": "index",
        "package_index_url": package_index.url,
        "docker_index_uplink": package_index.uplink,
    }
    yield overrides
    # The relay and the sealed network are kept between jobs; the test's go with it.
    settings = Settings(database_url="sqlite://", **overrides)
    client = docker.from_env()
    try:
        client.containers.get(prepare_network.relay_name(settings)).remove(force=True)
    except docker.errors.NotFound:
        pass
    for network in client.networks.list(names=[prepare_network.network_name(settings)]):
        network.remove()
    client.close()


def test_a_repository_with_requirements_prepares_and_runs_through_the_index(
    make_service, tmp_path, index_settings, package_index
):
    service = make_service(**index_settings)
    url, _ = make_repository(tmp_path / "repo", None)
    repo = tmp_path / "repo"
    # A new requirements file each time, so the install really runs (no cached image).
    requirements = f"# {uuid.uuid4().hex}\n{package_index.package}=={package_index.version}\n"
    (repo / "requirements.txt").write_text(requirements)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(repo)]
    subprocess.run([*git, "add", "requirements.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "requirements"], check=True)
    command = f"import {package_index.package} as p; assert p.VERSION == {package_index.version!r}; print('ok')"
    response = service.submit(
        {"repository": {"url": url}, "command": ["python3", "-c", command], "configs": ["cpuset=0"], "repeat": 1}
    )
    assert response.status_code == 201, response.get_json()
    job = service.wait(response.get_json()["id"], timeout_s=300)
    assert job["status"] == "done", job["error"]
    client = docker.from_env()
    try:
        # Through the relay on the sealed network, never the host's network.
        relay = client.containers.get(prepare_network.relay_name(service.settings))
        networks = relay.attrs["NetworkSettings"]["Networks"]
        assert set(networks) == {prepare_network.network_name(service.settings), package_index.uplink}
        sealed = client.networks.get(prepare_network.network_name(service.settings))
        assert sealed.attrs["Internal"] is True
    finally:
        # Installed now, not taken from a cache: the image the install made is there.
        removed = _remove_prepared_images(client, repo)
        client.close()
    assert removed == 1


def _remove_prepared_images(client, tree) -> int:
    """The dependency image this test's install made (named as the docker executor names it)."""
    base = client.images.get(Settings(database_url="sqlite://").docker_image).id
    plan = plan_install(tree)
    assert plan is not None
    removed = 0
    for image in client.images.list(name="lagtrace-deps", filters={"label": "lagtrace.deps.scope"}):
        scope = image.labels.get("lagtrace.deps.scope", "")
        tag = dependency_key(base.encode() + b"\0" + scope.encode() + b"\0", tree, plan)
        if f"lagtrace-deps:{tag}" in image.tags:
            client.images.remove(image.id, force=True)
            removed += 1
    return removed


def test_the_prepare_network_reaches_the_index_and_nothing_else(tmp_path, index_settings, package_index):
    from services.measure.executors.docker import DockerExecutor

    settings = Settings(database_url=f"sqlite:///{tmp_path / 'x.db'}", **index_settings)
    executor = DockerExecutor(settings, cache_scope=f"test-{time.time_ns()}")
    sealed = prepare_network.ensure(executor.client, settings, executor._image_id)
    postgres = _host_port(os.environ["LAGTRACE_TEST_POSTGRES_URL"])
    redis = _host_port(os.environ["LAGTRACE_TEST_REDIS_URL"])
    db_port, redis_port = postgres.rsplit(":")[1], redis.rsplit(":")[1]
    index_container = executor.client.containers.get(urlsplit(package_index.url).hostname)
    index_ip = index_container.attrs["NetworkSettings"]["Networks"][package_index.uplink]["IPAddress"]
    subnet = executor.client.networks.get(sealed).attrs["IPAM"]["Config"][0]["Subnet"]
    gateway = subnet.split("/")[0].rsplit(".", 1)[0] + ".1"
    forbidden = [postgres, redis, "169.254.169.254:80", f"{index_ip}:8080"]
    for address in [*host_addresses(), gateway]:
        forbidden += [f"{address}:{db_port}", f"{address}:{redis_port}"]
    index = _host_port(package_index.url)

    def probe(network: str) -> dict:
        container = executor.client.containers.create(
            executor.image,
            ["/usr/bin/python3", "-I", "-S", "-c", PROBE, index, *forbidden],
            network_mode=network,
            **executor._hardening(read_only=False, job_id=None),
        )
        try:
            container.start()
            container.wait(timeout=120)
            return json.loads(container.logs(stdout=True, stderr=False))
        finally:
            container.remove(force=True)

    reached = probe(sealed)
    assert reached[index] == "connected", reached
    assert [target for target in forbidden if reached[target] == "connected"] == [], reached
    assert reached["dns:example.com"] != "resolved", reached
    # The control: on the node's own network the same probe reaches the database and Redis.
    control = probe("host")
    assert control[postgres] == "connected" and control[redis] == "connected", control


def test_the_index_network_needs_an_index_and_keeps_credentials_out():
    with pytest.raises(ValueError, match="needs LAGTRACE_PACKAGE_INDEX_URL"):
        Settings(database_url="sqlite://", docker_prepare_network="index")
    with pytest.raises(ValueError, match="without user or password"):
        Settings(database_url="sqlite://", package_index_url="http://ci:pw@pypi.internal/simple/")
    assert Settings(database_url="sqlite://", package_index_url="http://pypi.internal:8080/simple/")
