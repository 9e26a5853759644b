"""The reads and asyncio_loop probes on real programs: what only a real run shows (the
tracer's view of socket reads, the hook loaded into a real interpreter)."""

from __future__ import annotations

import textwrap

from tests.services.measure.probes.probe_helpers import python_program, require_tool, run_probe

SOCKET_READER = textwrap.dedent("""
    import socket, sys, threading
    chunk = int(sys.argv[1])
    listener = socket.create_server(("127.0.0.1", 0))
    def serve():
        connection, _ = listener.accept()
        with connection:
            connection.sendall(b"x" * 20_000)
    threading.Thread(target=serve, daemon=True).start()
    with socket.create_connection(listener.getsockname()) as client:
        while client.recv(chunk):
            pass
""")


def test_reads_probe_sees_socket_reads_and_their_size(executor, tmp_path):
    require_tool(executor, "strace")
    command = python_program(tmp_path, SOCKET_READER)
    _, _, drafts = run_probe(executor, "reads", [*command, "2"], tmp_path / "tiny")
    by_type = drafts["reads"].content.by_fd_type
    socket = by_type["socket"]
    assert socket.reads_with_data == 10_000
    assert socket.median_bytes == 2 and socket.mode_bytes == 2
    # The interpreter's own start-up reads are files, kept apart.
    assert by_type["file"].median_bytes > 64

    _, _, drafts = run_probe(executor, "reads", [*command, "65536"], tmp_path / "large")
    assert drafts["reads"].content.by_fd_type["socket"].reads_with_data < 20


BLOCKED_LOOP = textwrap.dedent("""
    import asyncio, time
    def slow_lookup():
        time.sleep(0.05)  # a synchronous call in a coroutine
    async def worker():
        for _ in range(4):
            slow_lookup()
            await asyncio.sleep(0)
    async def main():
        await asyncio.gather(worker(), worker())
    asyncio.run(main())
""")


def test_asyncio_loop_probe_names_the_blocking_call(executor, tmp_path):
    _, _, drafts = run_probe(executor, "asyncio_loop", python_program(tmp_path, BLOCKED_LOOP), tmp_path / "run")
    content = drafts["asyncio_loop"].content
    assert content.ok
    assert content.slow_callbacks == 8
    assert 0.35 <= content.blocked_s <= 1.0
    [top] = content.blocking_calls[:1]
    assert top.call.startswith("slow_lookup (") and "program.py:4" in top.call
    assert top.count == 8
    # Both tasks run one coroutine: one task entry, whose stacks name its functions (how a
    # test's own coroutine is told apart when a whole suite is drilled).
    [task] = content.tasks
    assert task.callback.startswith("Task worker (") and task.count == 8
    assert any(f.startswith("slow_lookup (") and "program.py" in f for f in task.functions)


def test_asyncio_loop_probe_says_when_no_loop_ran(executor, tmp_path):
    _, _, drafts = run_probe(executor, "asyncio_loop", python_program(tmp_path, "print(1)\n"), tmp_path / "run")
    assert drafts["asyncio_loop"].content.status == "unavailable"


SHORT_BLOCKS = textwrap.dedent("""
    import asyncio, time
    def lookup():
        time.sleep(0.015)  # a synchronous call, under the 20 ms the stacks are taken from
    async def test_blocks():
        for _ in range(120):
            lookup()
            await asyncio.sleep(0.0005)
    async def test_quick():
        for _ in range(60):
            await asyncio.sleep(0.005)
    asyncio.run(test_blocks())
    time.sleep(0.3)  # between two loops: no loop runs, so no timer of one is late
    asyncio.run(test_quick())
""")


def test_asyncio_loop_probe_weighs_many_short_blocks_and_the_lag_they_caused(executor, tmp_path):
    command = python_program(tmp_path, SHORT_BLOCKS, "test_server.py")
    _, _, drafts = run_probe(executor, "asyncio_loop", command, tmp_path / "run")
    content = drafts["asyncio_loop"].content
    # Each block is under the per-callback line (20 ms); a busy machine stretches a few
    # past it (2 of 120 on a CI run), the rest stay under.
    assert content.ok and content.slow_callbacks <= 12
    # The 120 blocks of 15 ms, each from the floor on: the loop's blocked time in all.
    assert content.floor_s == 0.005 and content.held_callbacks == 120
    assert 1.75 <= content.held_s <= 2.4
    [blocks] = [caller for caller in content.callers if "test_blocks" in caller.callback]
    assert blocks.callback.startswith("Task test_blocks (") and "test_server.py:5" in blocks.callback
    assert blocks.count == 120
    assert not any("test_quick" in caller.callback for caller in content.callers)
    by_upper = {bucket.upper_s: bucket.count for bucket in content.durations}
    # 15 ms and the sleep's overshoot; those a busy machine stretched are past 20 ms.
    assert by_upper[0.02] + by_upper[0.01] + content.slow_callbacks >= 115
    # The heartbeat fired late behind each block, and its lag is charged to them; the
    # 0.3 s between the two loops is nobody's lag.
    heartbeat = content.heartbeat
    assert heartbeat.period_s == 0.005 and heartbeat.late_beats >= 100
    assert 0.005 <= heartbeat.lag_max_s < 0.1
    assert blocks.lag_s >= 0.5 and heartbeat.lag_total_s >= blocks.lag_s
    # test_quick's loop beat on time: its beats are there, not late.
    assert heartbeat.beats > heartbeat.late_beats + 30
