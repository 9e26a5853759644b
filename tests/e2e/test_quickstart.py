"""The service quickstart (docs/guides/service.md), its commands read from that page itself, run as a new
user would: as root with its real HOME (/root, mode 0700: the default work directory is
below it), as root with a LAGTRACE_WORK_DIR under /var/tmp, and as an ordinary user in the
docker group, against the real PostgreSQL, Redis and Docker engine. A page that drifts
from what works breaks this test."""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis
from sqlalchemy import create_engine, text

from tests.conftest import REPO, require
from tests.support.xdist import PROVISIONED_REDIS_URL

QUICKSTART_PAGE = REPO / "docs" / "guides" / "service.md"
DASHBOARD_PAGE = REPO / "docs" / "guides" / "dashboard.md"
SECTION = "## Quickstart"
# The first line of the quickstart. The session running this test ran it in this tree
# (`make test` installs, then provisions: .state/test.env), so root goes on from there;
# the ordinary user runs `make install` in a clone of their own (a venv on the system
# Python). `.ci/provision.sh` (apt, services) is root's alone.
SETUP = "make install && .ci/provision.sh"
USER = "lagtrace-quickstart"
QUICKSTART_TIMEOUT_S = 420  # beside other tests (the parallel tier) as well as alone


def quickstart_commands() -> list[str]:
    """The first shell block of the service page's quickstart, one command per line."""
    section = QUICKSTART_PAGE.read_text().split(SECTION, 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, f"no ```sh block under {SECTION!r} in {QUICKSTART_PAGE}"
    commands = []
    for raw in block.group(1).replace("\\\n", " ").splitlines():
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()  # the page's comments
        if line:
            commands.append(line)
    return commands


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def same_server(readme_url: str, test_url: str) -> bool:
    return urlsplit(readme_url).netloc.split("@")[-1] == urlsplit(test_url).netloc.split("@")[-1]


def script(
    commands: list[str], database_url: str, broker_url: str, port: int, test_pg: str, test_redis: str, install: bool
) -> str:
    """The quickstart's commands with what a shared test machine needs changed: a database and
    a Redis database of the test's own (on the servers the page names) and a free port."""
    assert commands[0] == SETUP, f"the quickstart no longer starts with {SETUP!r}: {commands[0]!r}"
    lines = ["set -euo pipefail", "trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT"]
    if install:
        lines.append("make install")
    for written in commands[1:]:
        command = written
        match = re.fullmatch(r"export (LAGTRACE_DATABASE_URL|LAGTRACE_BROKER_URL)=(\S+)", command)
        if match:
            name, value = match.groups()
            # An xdist worker's test_redis is a server of its own: the page names the provisioned one.
            redis_server = PROVISIONED_REDIS_URL or test_redis
            own, server = (database_url, test_pg) if name == "LAGTRACE_DATABASE_URL" else (broker_url, redis_server)
            assert same_server(value, server), f"the quickstart's {name}={value} is not the provisioned server {server}"
            command = f"export {name}={shlex.quote(own)}"
        assert "8080" not in command or "--port 8080" in command or "127.0.0.1:8080" in command, command
        lines.append(command.replace("--port 8080", f"--port {port}").replace("127.0.0.1:8080", f"127.0.0.1:{port}"))
    return "\n".join(lines) + "\n"


def ordinary_user() -> pwd.struct_passwd:
    """A user made as docs/guides/security.md says (home directory, docker group)."""
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--groups", "docker", USER], check=True)
        account = pwd.getpwnam(USER)
        # As adduser makes homes on Debian 12: the default work directory sits below it.
        Path(account.pw_dir).chmod(0o700)
        return account


def user_checkout(home: Path) -> Path:
    """The user's own clone of this tree (tracked and new files, as `git clone` of the
    branch would give): `make install` then makes the user's .venv on the system Python."""
    checkout = home / "lagtrace"
    shutil.rmtree(checkout, ignore_errors=True)
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True, check=True
    )
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = REPO / name
        if source.is_file():
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, checkout / name)
    owner = home.stat()
    for path in [checkout, *checkout.rglob("*")]:
        os.chown(path, owner.st_uid, owner.st_gid, follow_symlinks=False)
    return checkout


@pytest.fixture
def cleanup():
    with contextlib.ExitStack() as stack:
        yield stack


@pytest.fixture
def services(postgres_server_url, redis_url):
    name = f"lagtrace_quickstart_{uuid.uuid4().hex[:10]}"
    admin = create_engine(postgres_server_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    # Redis databases 1-15 go round the e2e stacks; this one picks from the same range.
    broker_url = f"{redis_url.rsplit('/', 1)[0]}/{15 - os.getpid() % 8}"
    redis.Redis.from_url(broker_url).flushdb()
    try:
        yield f"{postgres_server_url.rsplit('/', 1)[0]}/{name}", broker_url
    finally:
        redis.Redis.from_url(broker_url).flushdb()
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


# root-srv takes the same path as root-var-tmp (a work directory outside any home): nightly.
# Each install path's run ends with a report, beside other tests; the hand-off's verdict
# is asserted alone on the machine by tests/e2e/test_quickstart_browser.py (latency),
# which runs root's quickstart to the same finding and then opens it in the dashboard.
@pytest.mark.parametrize(
    "who", ["root", "root-var-tmp", pytest.param("root-srv", marks=pytest.mark.nightly), "ordinary-user"]
)
def test_the_readme_service_quickstart_ends_with_a_report(
    who, services, postgres_server_url, redis_url, tmp_path, cleanup
):
    require(os.geteuid() == 0, "running as root and as another user needs root")
    require(shutil.which("docker") is not None, "no docker CLI")
    database_url, broker_url = services
    port = free_port()
    install = who == "ordinary-user"
    body = script(quickstart_commands(), database_url, broker_url, port, postgres_server_url, redis_url, install)
    extra = {}
    if who.startswith("root"):
        # This machine's root, its real home: /root (mode 0700 on Debian) holds the default
        # LAGTRACE_WORK_DIR, which the runner image's uid 1000 never walks.
        home = Path(pwd.getpwuid(0).pw_dir)
        cwd, run_as = REPO, []
        if who in ("root-var-tmp", "root-srv"):
            # Directories the runner image has too (/var/tmp, /srv): its checkouts are
            # mounted elsewhere, so no path of the host's shadows one of the image's.
            parent = Path("/var/tmp" if who == "root-var-tmp" else "/srv")
            parent.mkdir(exist_ok=True)
            work = Path(tempfile.mkdtemp(prefix="lagtrace-quickstart-", dir=parent))
            cleanup.callback(shutil.rmtree, work, ignore_errors=True)
            extra["LAGTRACE_WORK_DIR"] = str(work / "work")
    else:
        account = ordinary_user()
        home = Path(account.pw_dir)
        cwd, run_as = user_checkout(home), [shutil.which("runuser") or "/usr/sbin/runuser", "-u", USER, "--"]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", **extra}
    # Files, not pipes: on a timeout the logs so far are still there to read.
    out_path, err_path = tmp_path / "stdout", tmp_path / "stderr"
    with out_path.open("w") as out_file, err_path.open("w") as err_file:
        process = subprocess.Popen(
            [*run_as, "/bin/bash", "-s"],  # the script on stdin: pytest's tmp dirs are root-only
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=out_file,
            stderr=err_file,
            text=True,
            start_new_session=True,
        )
        try:
            process.communicate(body, timeout=QUICKSTART_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
    out, err = out_path.read_text(), err_path.read_text()
    assert process.returncode == 0, f"{body}\n--- stdout\n{out}\n--- stderr\n{err[-6000:]}"
    assert re.search(r"^Findings( \(\d+\)|: none)$", out, re.M), out
    assert "command_failed" not in out, out
    assert re.search(r"^lagtrace: job \d+: done, \d+/\d+ runs", err, re.M), err[-3000:]


def test_the_dashboard_section_follows_on_from_the_quickstart():
    """The dashboard user sees the project the quickstart's token submits to, and every
    command there calls the lagtrace that `make install` made (a bare `lagtrace` is on no
    PATH)."""
    token = next(c for c in quickstart_commands() if "token create" in c)
    project = re.search(r"--project ([^\s)]+)", token)
    dashboard = DASHBOARD_PAGE.read_text().split("# Dashboard", 1)[1].split("\n## ", 1)[0]
    commands = [line.strip() for line in dashboard.splitlines() if line.startswith("    ") and "lagtrace " in line]
    assert project and commands
    user = next(c for c in commands if " user create " in c and "--admin" not in c)
    assert f"--project {project.group(1)}" in user, (token, user)
    for command in commands:
        program = next(word for word in shlex.split(command) if word.endswith("lagtrace"))
        assert program == ".venv/bin/lagtrace", command
