"""A command that is no pytest suite gets a census too: its warm-up run in the census's
configuration carries the asyncio hook, so an event loop its callbacks block is weighed
even where its timing is flat across configurations and the screen finds nothing
(services/measure/survey_census.py)."""

from __future__ import annotations

import pytest

from tests.conftest import PYTHON, run_cli

# An asyncio key-value server whose handler hashes each value on the loop thread (about
# 12 ms of CPU a request; ``--rounds`` fewer, less), 48 requests from 8 clients (``--each``): the loop is blocked most of the
# run, and a CPU-bound program is as fast on one core as on two. ``await_instead`` is its
# healthy twin: the same 12 ms spent awaiting, the loop free.
SERVER = """\
import asyncio
import hashlib
import sys

AWAIT_INSTEAD = "--await" in sys.argv
ROUNDS = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 36000
EACH = int(sys.argv[sys.argv.index("--each") + 1]) if "--each" in sys.argv else 6


def digest(value):
    out = value
    for _ in range(ROUNDS):
        out = hashlib.sha256(out).digest()
    return out


async def handle(reader, writer):
    while data := await reader.readline():
        if AWAIT_INSTEAD:
            await asyncio.sleep(0.012)
            answer = data
        else:
            answer = digest(data)
        writer.write(answer.hex().encode() + b"\\n")
        await writer.drain()
    writer.close()


async def client(port, n):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for i in range(n):
        writer.write(f"value-{i}\\n".encode())
        await writer.drain()
        await reader.readline()
    writer.close()


async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    await asyncio.gather(*(client(port, EACH) for _ in range(8)))
    server.close()


asyncio.run(main())
"""


def run_server(tmp_path, database_url, *args: str) -> dict:
    (tmp_path / "server.py").write_text(SERVER)
    out = tmp_path / "report.json"
    command = [PYTHON, str(tmp_path / "server.py"), *args]
    cli = ["run", "--executor", "local", "--config", "cpuset=0", "--config", "cpuset=0-1", "--repeat", "3"]
    result = run_cli([*cli, "--json", str(out), "--", *command], database_url)
    assert result.returncode == 0, result.stderr
    return result.report(out)


# The blocked share is a verdict on the run's time: never beside other CPU work.
@pytest.mark.latency
def test_a_program_whose_callbacks_block_its_loop_is_found_from_its_warm_up_run(sqlite_url, tmp_path):
    report = run_server(tmp_path, sqlite_url)
    [finding] = [f for f in report["findings"] if f["kind"] == "event_loop_blocked"]
    assert finding["severity"] in ("medium", "high") and finding["test"] is None, finding
    # About 48 x 12 ms, most of the run, by short callbacks: none reaches the 20 ms at which
    # a stack is taken.
    assert finding["metrics"]["blocked_s"] >= 0.3, finding["metrics"]
    assert "short callbacks" in finding["title"], finding["title"]
    # The census saw it first, in a run of the screen (its warm-up), no evidence run: without
    # it, a flat timing screen drills nothing ("no evidence runs: the timing screen found
    # nothing"); with it, the drill looks, and the finding is the census's or the drill's.
    probed = {run["id"] for run in report["evidence_runs"]}
    [census] = [e for e in report["evidence"] if e["kind"] == "asyncio_loop" and e["run"] not in probed]
    assert census["config"] == "cpuset=0" and census["content"]["held_s"] >= 0.3, census
    loops = {e["id"] for e in report["evidence"] if e["kind"] == "asyncio_loop"}
    assert set(finding["evidence"]) <= loops and finding["evidence"], finding


@pytest.mark.latency
def test_its_twin_that_awaits_instead_has_an_idle_loop_and_no_finding(sqlite_url, tmp_path):
    report = run_server(tmp_path, sqlite_url, "--await")
    assert [f for f in report["findings"] if f["severity"] in ("medium", "high")] == [], report["findings"]
    [census] = [e for e in report["evidence"] if e["kind"] == "asyncio_loop"]
    assert census["content"]["held_s"] < 0.05, census["content"]


# The same server hashing about 2.5 ms for each of 96 requests: no callback reaches the 5 ms floor, but
# eight clients' requests queue behind each other, and the probe's heartbeat fires 15-30 ms
# late behind each batch. The loop is blocked as much; the finding says so from the
# heartbeat and the callbacks' CPU time (services/diagnose/event_loop_blocked.py).
@pytest.mark.latency
def test_callbacks_too_short_for_the_floor_block_the_loop_all_the_same(sqlite_url, tmp_path):
    report = run_server(tmp_path, sqlite_url, "--rounds", "8000", "--each", "12")
    [finding] = [f for f in report["findings"] if f["kind"] == "event_loop_blocked"]
    assert finding["severity"] in ("medium", "high"), finding
    metrics = finding["metrics"]
    assert metrics["blocked_s"] >= 0.15 and metrics.get("heartbeat_blocked_s"), metrics
    # The census's run had the hook: the callbacks of a millisecond or more computed.
    [census] = [e for e in report["evidence"] if e["kind"] == "asyncio_loop" and e["config"] == "cpuset=0"][:1]
    assert census["content"]["heavy"]["count"] >= 90 and census["content"]["heavy"]["cpu_s"] > 0.15, census
