"""The sealed network the prepare step installs through: it reaches the package index the
operator named (LAGTRACE_PACKAGE_INDEX_URL) and nothing else.

- ``lagtrace-prepare-<installation>``: an *internal* bridge network (no route out where
  the engine enforces it with iptables) whose bridge has no address on the host
  (``inhibit_ipv4``), so a prepare container cannot reach the node's own services either,
  even on an engine started with ``--iptables=false`` (this project's CI), where
  ``internal`` alone still routes to the host.
- ``lagtrace-index-relay-<installation>``: one small hardened container (the runner
  image's python3, ``index_relay.py``) on that network under the index's own host name,
  and on an uplink network (LAGTRACE_DOCKER_INDEX_UPLINK, the engine's ``bridge`` by
  default) through which it reaches the index. It forwards TCP to the index's address
  and port only, so pip keeps the operator's URL and its TLS check.

Both are made on first use and kept; the relay is recreated when its index, uplink or
image change, or when it is not running.
"""

from __future__ import annotations

import hashlib
import time
from importlib import resources
from urllib.parse import urlsplit

from docker.errors import APIError, NotFound

from services.errors import BadInput, LagtraceError
from services.settings import Settings

INSTALLATION_LABEL = "lagtrace.installation"
RELAY_LABEL = "lagtrace.index-relay"
RELAY_UID = "1000:1000"
RELAY_READY_S = 30.0


def network_name(settings: Settings) -> str:
    return f"lagtrace-prepare-{settings.installation}"


def relay_name(settings: Settings) -> str:
    return f"lagtrace-index-relay-{settings.installation}"


def index_address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if not parts.hostname:
        raise BadInput(f"LAGTRACE_PACKAGE_INDEX_URL {url!r} names no host")
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


def _relay_source() -> str:
    return resources.files("services.measure.executors").joinpath("index_relay.py").read_text()


def ensure(client, settings: Settings, image: str) -> str:
    """Make (or find) the sealed network and its relay; return the network's name."""
    if not settings.package_index_url:
        raise BadInput("LAGTRACE_DOCKER_PREPARE_NETWORK=index needs LAGTRACE_PACKAGE_INDEX_URL")
    host, port = index_address(settings.package_index_url)
    network = _network(client, settings)
    subnet = network.attrs["IPAM"]["Config"][0]["Subnet"]
    source = _relay_source()
    # What the relay is: recreated when any of it changes.
    wanted = hashlib.sha256(
        "\0".join([host, str(port), settings.docker_index_uplink, image, subnet, source]).encode()
    ).hexdigest()[:16]
    deadline = time.monotonic() + RELAY_READY_S
    while True:
        try:
            relay = client.containers.get(relay_name(settings))
        except NotFound:
            relay = None
        if relay is not None:
            current = relay.labels.get(RELAY_LABEL) == wanted and relay.status in ("created", "running")
            attached = network.name in (relay.attrs["NetworkSettings"]["Networks"] or {})
            if current and relay.status == "running" and attached:
                return network.name
            # Current but not yet on the network: another worker on this engine is starting
            # it; waited for, then replaced should that worker have died half-way. A stale
            # one (another index, image or uplink; exited) is replaced at once.
            if not current or time.monotonic() > deadline:
                _remove(relay)
                relay = None
                deadline = time.monotonic() + RELAY_READY_S
        if relay is None:
            try:
                _start_relay(client, settings, network, image, source, host, port, subnet, wanted)
                return network.name
            except APIError as exc:
                if exc.status_code != 409:  # 409: another worker made it first
                    raise LagtraceError(f"cannot start the package index relay: {exc.explanation or exc}") from None
        time.sleep(0.2)


def _network(client, settings: Settings):
    name = network_name(settings)
    for _ in range(2):
        found = client.networks.list(names=[name])
        exact = [n for n in found if n.name == name]
        if exact:
            network = client.networks.get(exact[0].id)
            if not network.attrs.get("Internal"):
                raise BadInput(f"the docker network {name} is not internal; remove it and lagtrace makes it again")
            return network
        try:
            return client.networks.create(
                name,
                driver="bridge",
                internal=True,
                check_duplicate=True,
                options={"com.docker.network.bridge.inhibit_ipv4": "true"},
                labels={INSTALLATION_LABEL: settings.installation},
            )
        except APIError as exc:
            if exc.status_code != 409:
                raise LagtraceError(f"cannot create the docker network {name}: {exc.explanation or exc}") from None
    raise LagtraceError(f"cannot create the docker network {name}")


def _start_relay(client, settings: Settings, network, image, source, host, port, subnet, wanted) -> None:
    try:
        container = client.containers.create(
            image,
            ["/usr/bin/python3", "-I", "-S", "-c", source, host, str(port), subnet],
            name=relay_name(settings),
            labels={RELAY_LABEL: wanted, INSTALLATION_LABEL: settings.installation},
            network=settings.docker_index_uplink,
            user=RELAY_UID,
            read_only=True,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            # The index's own port, 80 or 443 too, without a capability.
            sysctls={"net.ipv4.ip_unprivileged_port_start": "0"},
            mem_limit="128m",
            pids_limit=256,
        )
    except NotFound as exc:
        raise BadInput(
            f"cannot start the package index relay: {exc.explanation or exc} "
            "(LAGTRACE_DOCKER_INDEX_UPLINK names the network the index is reached through)"
        ) from None
    try:
        container.start()
        # It resolves the index on the uplink first: attached to the sealed network under
        # the index's name, the engine's DNS would answer that name with the relay itself.
        deadline = time.monotonic() + RELAY_READY_S
        while b"resolved " not in container.logs(stdout=True, stderr=False):
            container.reload()
            if container.status != "running" or time.monotonic() > deadline:
                log = container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
                raise LagtraceError(
                    f"the package index relay cannot reach {host}:{port} through the docker network "
                    f"{settings.docker_index_uplink} (LAGTRACE_DOCKER_INDEX_UPLINK): {log.strip()[-500:]}"
                )
            time.sleep(0.1)
        network.connect(container, aliases=[host])
    except BaseException:
        _remove(container)
        raise


def _remove(container) -> None:
    try:
        container.remove(force=True)
    except NotFound:
        pass
