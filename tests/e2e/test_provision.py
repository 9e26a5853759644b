""".ci/provision.sh as an ordinary user without sudo (the README's user, in the docker
group): with every service answering it needs no root and writes .state/test.env; with
something missing it names it and the one command root runs, and exits 1 (not 127 on
`sudo: command not found`)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.conftest import require
from tests.e2e.test_quickstart import ordinary_user, user_checkout

# What every process of the user sees: no sudo anywhere on it (none is installed here,
# and a machine that has one must not lend it to this test).
PATH = "/usr/local/bin:/usr/bin:/bin"


def provision_as_user(checkout: Path, home: Path, *args: str) -> subprocess.CompletedProcess:
    runuser = shutil.which("runuser") or "/usr/sbin/runuser"
    account = home.name
    return subprocess.run(
        [runuser, "-u", account, "--", str(checkout / ".ci" / "provision.sh"), *args],
        cwd=checkout,
        env={"PATH": PATH, "HOME": str(home), "LANG": "C.UTF-8"},
        stdin=subprocess.DEVNULL,  # no terminal: a sudo could not ask for a password either
        capture_output=True,
        text=True,
        timeout=300,
    )


def _machine_provisioned() -> None:
    require(os.geteuid() == 0, "making an ordinary user needs root")
    require(shutil.which("docker") is not None, "no docker CLI")
    # Root's `.ci/provision.sh` (make test) ran: a runner image is there. Whether it is the
    # one the user's run looks for (the recipe's tag) is what the first test checks.
    found = subprocess.run(["docker", "image", "inspect", "lagtrace-runner:latest"], capture_output=True)
    require(found.returncode == 0, "no runner image: .ci/provision.sh as root builds it")


def test_an_ordinary_user_needs_no_root_once_everything_answers():
    _machine_provisioned()
    account = ordinary_user()
    home = Path(account.pw_dir)
    checkout = user_checkout(home)
    done = provision_as_user(checkout, home)
    assert done.returncode == 0, done.stderr
    assert "sudo" not in done.stderr and "root" not in done.stderr, done.stderr
    env = (checkout / ".state" / "test.env").read_text()
    assert "LAGTRACE_TEST_POSTGRES_URL=postgresql+psycopg://postgres@127.0.0.1:54329/postgres" in env
    assert "LAGTRACE_TEST_REDIS_URL=redis://127.0.0.1:" in env
    # The chart's tooling is not provisioning's any more (.ci/provision-chart.sh).
    assert "LAGTRACE_HELM" not in env and "LAGTRACE_TEST_SERVICE_IMAGE" not in env
    assert (checkout / ".state" / "test.env").stat().st_uid == account.pw_uid


def test_an_ordinary_user_without_sudo_is_told_what_root_runs():
    _machine_provisioned()
    account = ordinary_user()
    home = Path(account.pw_dir)
    checkout = user_checkout(home)
    # A Debian package this machine lacks: only root can install it.
    missing = "cowsay"
    installed = subprocess.run(["dpkg-query", "-W", "-f=${Status}", missing], capture_output=True, text=True)
    require("install ok installed" not in installed.stdout, f"{missing} is installed here")
    with (checkout / ".ci" / "apt-packages.txt").open("a") as listed:
        listed.write(f"{missing}\n")
    done = provision_as_user(checkout, home)
    assert done.returncode == 1, done.stderr
    assert "command not found" not in done.stderr, done.stderr
    assert f"Debian packages: {missing}" in done.stderr
    assert "sudo is not installed" in done.stderr or "sudo needs a password" in done.stderr
    assert f"as root, run:\nprovision:     {checkout}/.ci/provision.sh --system\n" in done.stderr
    assert not (checkout / ".state" / "test.env").exists()
