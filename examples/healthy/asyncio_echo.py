"""Healthy: an asyncio echo server and its client in one loop, 5,000 small requests,
each answered at once. Its callbacks are short; under a CPU quota the whole process is
throttled now and then, which stretches whatever callback is running: that is the
quota's doing, not a blocked loop.

    python3 examples/healthy/asyncio_echo.py
"""

import asyncio
import time


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while line := await reader.readline():
        writer.write(line.upper())
        await writer.drain()
    writer.close()


async def main(requests: int = 5000) -> float:
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.perf_counter()
    for i in range(requests):
        writer.write(f"request {i}\n".encode())
        await writer.drain()
        assert (await reader.readline()).startswith(b"REQUEST")
        if i % 100 == 0:
            await asyncio.sleep(0.01)
    elapsed = time.perf_counter() - started
    writer.close()
    await writer.wait_closed()
    await asyncio.sleep(0.01)  # the handler reads the end of the stream and closes its side
    server.close()
    await server.wait_closed()
    return elapsed


if __name__ == "__main__":
    print(f"5000 echoes in {asyncio.run(main()):.3f} s")
