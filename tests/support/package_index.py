"""A real package index for the prepare step's tests: pypiserver (a test extra) serving a
wheelhouse, in a container of the test engine on its own network, as an index runs beside
the engine in a cluster. The prepare step reaches it only through lagtrace's relay."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.service_support import write_wheel

NAME = "lagtrace-ci-index"  # the container, its network, and the URL's host
PORT = 8080
PACKAGE = "lagtrace_index_probe"
VERSION = "1.0.0"


@dataclass
class PackageIndex:
    url: str
    uplink: str  # the network the relay reaches it through
    package: str
    version: str


@pytest.fixture(scope="session")
def package_index(tmp_path_factory):
    import docker
    import pypiserver

    from services.settings import Settings
    from tests.security.conftest import docker_ready

    docker_ready(Settings(database_url="sqlite://"))
    client = docker.from_env()
    wheels = tmp_path_factory.mktemp("wheelhouse")
    wheels.chmod(0o755)
    write_wheel(wheels, PACKAGE, VERSION).chmod(0o644)
    # pypiserver as the test venv installed it, run by the runner image's python3 (3.11).
    site_packages = Path(pypiserver.__file__).resolve().parent.parent
    suffix = uuid.uuid4().hex[:8]
    network = client.networks.create(f"{NAME}-{suffix}", driver="bridge", check_duplicate=True)
    container = client.containers.run(
        "lagtrace-runner:latest",
        ["/usr/bin/python3", "-m", "pypiserver", "run", "-p", str(PORT), "-a", ".", "-P", ".", "/wheels"],
        name=f"{NAME}-{suffix}",
        detach=True,
        network=network.name,
        user="1000:1000",
        environment={"PYTHONPATH": "/lagtrace/site", "HOME": "/tmp"},
        volumes={
            str(site_packages): {"bind": "/lagtrace/site", "mode": "ro"},
            str(wheels): {"bind": "/wheels", "mode": "ro"},
        },
        read_only=True,
        tmpfs={"/tmp": ""},
    )
    try:
        deadline = time.monotonic() + 60
        while b"Listening on" not in container.logs():
            container.reload()
            if container.status == "exited" or time.monotonic() > deadline:
                raise RuntimeError(f"pypiserver did not start: {container.logs().decode()[-2000:]}")
            time.sleep(0.2)
        yield PackageIndex(f"http://{container.name}:{PORT}/simple/", network.name, PACKAGE, VERSION)
    finally:
        container.remove(force=True)
        network.remove()
        client.close()
