"""An asyncio server whose every request blocks the loop a little: 15 ms, 120 times.

Each request looks its item up through a synchronous client (a blocking socket to an
inventory service that answers in 15 ms, like a synchronous database driver or an HTTP
client called from a coroutine). No callback comes near asyncio debug mode's 100 ms, or a
20 ms line drawn on one callback; together they hold the loop most of the run, and every
other connection waits behind them.

`--backend-ms 2` is the healthy twin: the same server and load, an inventory service that
answers in 2 ms, so each callback stays short and the loop stays free most of the time.

    python server.py [--backend-ms MS]
"""

import argparse
import asyncio
import socket
import threading
import time

CLIENTS = 6
REQUESTS = 20  # per client: 120 in all


def inventory(listener: socket.socket, answer_s: float) -> None:
    """The inventory service: answers each lookup after ``answer_s``."""
    pause = threading.Event()
    while True:
        connection, _ = listener.accept()
        with connection, connection.makefile("rb") as lines:
            for line in lines:
                pause.wait(answer_s)
                connection.sendall(b"in stock: " + line)


class InventoryClient:
    """A synchronous client: each lookup waits for the service's answer."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sink = socket.create_connection(address)
        self.answers = self.sink.makefile("rb")

    def lookup(self, item: bytes) -> bytes:
        self.sink.sendall(item)
        return self.answers.readline()  # blocks the calling thread, here the loop's


async def serve(client: InventoryClient) -> asyncio.AbstractServer:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while item := await reader.readline():
            writer.write(client.lookup(item))
            await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def shopper(port: int, name: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for request in range(REQUESTS):
        writer.write(b"item-%d-%d\n" % (name, request))
        await reader.readline()
    writer.close()
    await writer.wait_closed()


async def main(backend_s: float) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=inventory, args=(listener, backend_s), daemon=True).start()
    server = await serve(InventoryClient(listener.getsockname()))
    port = server.sockets[0].getsockname()[1]
    async with server:
        await asyncio.gather(*(shopper(port, n) for n in range(CLIENTS)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend-ms", type=float, default=15.0)
    backend_s = parser.parse_args().backend_ms / 1000
    started = time.perf_counter()
    asyncio.run(main(backend_s))
    elapsed = time.perf_counter() - started
    print(f"{CLIENTS * REQUESTS} requests, {backend_s * 1000:g} ms lookups each: served in {elapsed:.3f} s")
