"""Each timing rule proven on a program that provokes it, by running `lagtrace run`.

Every rule is tried twice: on the example shipped in examples/, and on a program
written here independently (same pathology, different code), as a new user's would be.
"""

from __future__ import annotations

import sys
import textwrap

import pytest

from tests.conftest import EXAMPLES, PYTHON, run_cli


def screen(tmp_path, database_url, command, *args):
    out = tmp_path / f"report{len(list(tmp_path.glob('report*.json')))}.json"
    # local: the programs and their state files live in tmp_path, outside any container
    result = run_cli(["run", "--executor", "local", *args, "--json", str(out), "--", *command], database_url)
    assert result.returncode == 0, result.stderr
    return result.report(out), result


def of_kind(report, kind):
    return [f for f in report["findings"] if f["kind"] == kind]


def write(tmp_path, name, code):
    path = tmp_path / name
    path.write_text(textwrap.dedent(code))
    return str(path)


# --- cpu_throttling -------------------------------------------------------------

THREAD_HASHER = """
    import hashlib, os, threading
    # A worker per visible core, each hashing: the quota, not the cores, is the limit.
    def hash_for_a_while():
        data = b"x" * 4096
        for _ in range(40_000):
            data = hashlib.sha256(data).digest() * 128
    threads = [threading.Thread(target=hash_for_a_while) for _ in range(os.cpu_count())]
    [t.start() for t in threads]
    [t.join() for t in threads]
"""


@pytest.mark.latency
@pytest.mark.parametrize("program", ["example", "independent"])
def test_a_pool_wider_than_the_quota_that_takes_its_cpu_time_over_the_quota_is_no_finding(
    program, sqlite_url, tmp_path
):
    # docs/reference/findings.md (cpu_throttling): throttled in most periods, yet the run takes its CPU time divided by the
    # quota, as a pool sized to the quota would: the quota's share, no cost of its own.
    path = str(EXAMPLES / "pool_quota.py") if program == "example" else write(tmp_path, "hasher.py", THREAD_HASHER)
    report, result = screen(
        tmp_path, sqlite_url, [PYTHON, path], "--config", "cpus=0.5", "--config", "cpuset=0-1", "--repeat", "3"
    )
    quota = next(c for c in report["configs"] if c["label"] == "cpus=0.5")
    throttled = sum(r["nr_throttled"] for r in quota["runs"])
    assert throttled >= 0.2 * sum(r["nr_periods"] for r in quota["runs"])  # throttled all right ...
    assert not [f for f in of_kind(report, "cpu_throttling") if f["severity"] != "low"], result.stdout  # ... at no cost


SINGLE_THREAD = """
    import hashlib
    # One thread hashing for about half a second: under cpus=0.5 it takes twice as long,
    # which is what the quota means, not a fault of the program.
    data = b"x" * 4096
    for _ in range(30_000):
        data = hashlib.sha256(data).digest() * 128
"""


@pytest.mark.latency
def test_a_single_thread_slowed_by_the_quota_factor_is_no_cpu_throttling(sqlite_url, tmp_path):
    path = write(tmp_path, "one_thread.py", SINGLE_THREAD)
    report, result = screen(
        tmp_path, sqlite_url, [PYTHON, path], "--config", "cpus=0.5", "--config", "cpuset=0", "--repeat", "5"
    )
    quota = next(c for c in report["configs"] if c["label"] == "cpus=0.5")
    assert sum(r["nr_throttled"] for r in quota["runs"]) >= len(quota["runs"])  # it was throttled ...
    assert not of_kind(report, "cpu_throttling"), result.stdout  # ... as the quota says, no more
    # Twice as slow is what its CPU time rationed to half a core takes: no sensitivity either.
    assert not of_kind(report, "cpu_sensitivity"), result.stdout
    assert not [f for f in report["findings"] if f["severity"] in ("medium", "high")], result.stdout


# --- off_cpu_wait ---------------------------------------------------------------

PIPE_WAITER = """
    import subprocess, sys
    # Waits on a child that dribbles its output: the parent's time is all off the CPU.
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\\nfor i in range(12):\\n    print(i, flush=True); time.sleep(0.1)"],
        stdout=subprocess.PIPE)
    for line in child.stdout:
        pass
    child.wait()
"""


@pytest.mark.latency
@pytest.mark.parametrize("program", ["example", "independent"])
def test_off_cpu_wait_when_wall_time_is_mostly_waiting(program, sqlite_url, tmp_path):
    path = str(EXAMPLES / "slow_peer.py") if program == "example" else write(tmp_path, "waiter.py", PIPE_WAITER)
    # A timing rule: the drill that a command over 1 s gets by default adds nothing to it.
    args = ["--config", "cpuset=0-1", "--repeat", "3", "--evidence", "none"]
    report, _ = screen(tmp_path, sqlite_url, [PYTHON, path], *args)
    [finding] = of_kind(report, "off_cpu_wait")
    metrics = finding["metrics"]
    assert metrics["median_wall_s"] >= 1.0
    assert metrics["cpu_share"] <= 0.25
    assert metrics["median_cpu_s"] < 0.25 * metrics["median_wall_s"]
    assert f"median wall {metrics['median_wall_s']:.3f} s" in finding["detail"]


# --- latency_flaky --------------------------------------------------------------

EXPIRING_CACHE = """
    import os, sys, time
    # A cache that is rebuilt (slowly) on every third run: two latencies, same machine.
    state = sys.argv[1]
    os.makedirs(state, exist_ok=True)
    marker = os.path.join(state, "count")
    count = int(open(marker).read()) if os.path.exists(marker) else 0
    open(marker, "w").write(str(count + 1))
    time.sleep(0.5 if count % 3 == 2 else 0.03)
"""


@pytest.mark.latency
@pytest.mark.parametrize("program", ["example", "independent"])
def test_latency_flaky_when_runs_fall_into_two_groups(program, sqlite_url, tmp_path):
    path = str(EXAMPLES / "stale_lock.py") if program == "example" else write(tmp_path, "cache.py", EXPIRING_CACHE)
    # A timing rule: the drill of a flaky command adds nothing to it.
    args = ["--config", "cpuset=0-1", "--repeat", "6", "--evidence", "none"]
    report, _ = screen(tmp_path, sqlite_url, [PYTHON, path, str(tmp_path / "state")], *args)
    runs = len(report["configs"][0]["runs"])
    assert runs >= 5  # a spread-out configuration is not stopped at 3
    [finding] = of_kind(report, "latency_flaky")
    metrics = finding["metrics"]
    assert metrics["pattern"] == "multimodal"
    assert len(metrics["slow_runs"]) == 2 and len(metrics["fast_runs"]) == runs - 2
    assert metrics["ratio"] >= 2


# --- healthy programs -----------------------------------------------------------

QUIET_SERVICE_CALL = """
    import json, socket, threading
    # A quick request-response over loopback with a little JSON: nothing to find.
    server = socket.create_server(("127.0.0.1", 0))
    def answer():
        conn, _ = server.accept()
        with conn:
            conn.sendall(json.dumps({"ok": True, "items": list(range(100))}).encode())
    threading.Thread(target=answer).start()
    with socket.create_connection(server.getsockname()) as client:
        data = b""
        while chunk := client.recv(65536):
            data += chunk
    assert json.loads(data)["ok"]
"""


@pytest.mark.latency
@pytest.mark.parametrize("program", ["example", "independent"])
def test_healthy_programs_yield_no_finding_at_all(program, sqlite_url, tmp_path):
    path = str(EXAMPLES / "steady.py") if program == "example" else write(tmp_path, "quiet.py", QUIET_SERVICE_CALL)
    report, result = screen(tmp_path, sqlite_url, [PYTHON, path], "--repeat", "5")  # the default matrix
    assert report["findings"] == [], result.stdout


# No finding is a latency verdict: beside other work pytest's start-up alone took 2.78 s
# (100 % of the run) and was flagged slow_startup.
@pytest.mark.latency
def test_healthy_pytest_tests_yield_no_finding(sqlite_url, tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "pytest.ini").write_text("[pytest]\n")
    (suite / "test_fine.py").write_text("def test_adds():\n    assert 1 + 1 == 2\n")
    report, _ = screen(
        tmp_path,
        sqlite_url,
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite)],
        "--workdir",
        str(suite),
        "--config",
        "cpuset=0",
        "--config",
        "cpuset=0-1",
        "--repeat",
        "3",
    )
    assert [t["id"] for t in report["tests"]] == ["test_fine.py::test_adds"]
    assert report["findings"] == []
