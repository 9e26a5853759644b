"""Tests only a tracer sees (the census's quarry): one polls with 0.5 ms sleeps, one reads a
socket a byte at a time; neither is slow nor CPU-sensitive. Beside quick fillers."""

from __future__ import annotations

HEADER = """import socket
import time

import pytest
"""

FILLERS = """

@pytest.mark.parametrize("n", range({count}))
def test_filler(n):
    time.sleep(0.005)
"""

POLLS = """

def test_polls():
    # Waits by waking up every 0.5 ms: the same in every configuration, no timing mark.
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:
        time.sleep(0.0005)
"""

READS_BYTES = """

def test_reads_a_byte_at_a_time():
    ours, theirs = socket.socketpair()
    theirs.sendall(b"x" * 30000)
    theirs.close()
    received = 0
    while ours.recv(1):
        received += 1
    assert received == 30000
"""


def hidden_suite(fillers: int, *hidden: str) -> str:
    """A test file: ``fillers`` quick tests, then the ``hidden`` ones (POLLS, READS_BYTES)."""
    return HEADER + FILLERS.format(count=fillers) + "".join(hidden)


BLOCKS_LOOP = """

def test_blocks_its_loop():
    # A coroutine blocks its loop 0.2 s in a synchronous call while a heartbeat should
    # tick every 5 ms: no CPU, one sleep, the same on one core as on two.
    import asyncio

    async def heartbeat():
        while True:
            await asyncio.sleep(0.005)

    async def main():
        beat = asyncio.create_task(heartbeat())
        await asyncio.sleep(0.02)
        time.sleep(0.2)
        beat.cancel()

    asyncio.run(main())


def test_awaits_its_wait():
    # Its twin: the same 0.2 s awaited, the heartbeat on time.
    import asyncio

    async def heartbeat():
        while True:
            await asyncio.sleep(0.005)

    async def main():
        beat = asyncio.create_task(heartbeat())
        await asyncio.sleep(0.22)
        beat.cancel()

    asyncio.run(main())
"""
