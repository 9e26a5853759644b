"""An asyncio key-value server that hashes each value on the loop thread: about 3 ms of
CPU a request, 192 requests from 8 clients.

No callback comes near a 5 ms line drawn on one callback, let alone asyncio debug mode's
100 ms; but the eight clients' requests queue behind each other, so every batch holds the
loop 10-30 ms and any other coroutine (a timer, a health check, another connection) waits
that long. The loop is blocked most of the run by callbacks that each look short.

`--chunk 300` is the healthy twin: the same work, hashed 300 rounds at a time with an
`await asyncio.sleep(0)` between chunks, so the loop runs every other coroutine between
chunks of about 0.1 ms. The CPU time is the same; the loop is free.

    python server.py [--chunk ROUNDS]
"""

import argparse
import asyncio
import hashlib

CLIENTS = 8
REQUESTS = 24  # per client: 192 in all
ROUNDS = 9000  # sha256 rounds a request: about 3 ms of CPU here


async def digest(value: bytes, chunk: int) -> bytes:
    out = value
    for done in range(ROUNDS):
        out = hashlib.sha256(out).digest()
        if chunk and done % chunk == chunk - 1:
            await asyncio.sleep(0)  # let the loop run everything else that is ready
    return out


def serve(chunk: int):
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.readline():
            writer.write((await digest(data, chunk)).hex().encode() + b"\n")
            await writer.drain()
        writer.close()

    return handle


async def client(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for i in range(REQUESTS):
        writer.write(f"value-{i}\n".encode())
        await writer.drain()
        await reader.readline()
    writer.close()


async def main(chunk: int) -> None:
    server = await asyncio.start_server(serve(chunk), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    await asyncio.gather(*(client(port) for _ in range(CLIENTS)))
    server.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunk", type=int, default=0, help="hash this many rounds between yields (0: all at once)")
    asyncio.run(main(parser.parse_args().chunk))
