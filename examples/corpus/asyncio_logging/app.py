"""Story 3: coroutines logging through a slow synchronous handler block the event loop.

Every log call runs the handler's emit() on the loop thread; a handler that ships each
record to a slow sink and waits for its answer (here a log collector that acknowledges
each record after 30 ms, like a synchronous HTTP or syslog handler) stalls every other
coroutine while it runs. `--queue` is the healthy twin: a
QueueHandler on the loop thread and the slow handler on a QueueListener's thread.

    python app.py [--queue]
"""

import asyncio
import logging
import logging.handlers
import queue
import socket
import sys
import threading
import time


def collector(listener: socket.socket) -> None:
    """A log collector that takes 30 ms to acknowledge each record."""
    connection, _ = listener.accept()
    pause = threading.Event()
    with connection, connection.makefile("rb") as lines:
        for _line in lines:
            pause.wait(0.03)
            connection.sendall(b"ok\n")


class SlowSinkHandler(logging.Handler):
    """Ships each record and waits for the collector's acknowledgement."""

    def __init__(self) -> None:
        super().__init__()
        listener = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=collector, args=(listener,), daemon=True).start()
        self.sink = socket.create_connection(listener.getsockname())

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.sendall(self.format(record).encode() + b"\n")
        self.sink.recv(16)  # blocks the calling thread for the collector's 30 ms


async def worker(name: int, log: logging.Logger) -> None:
    for step in range(8):
        await asyncio.sleep(0.02)
        log.warning("worker %d finished step %d", name, step)


async def main() -> None:
    log = logging.getLogger("app")
    await asyncio.gather(*(worker(n, log) for n in range(6)))


if __name__ == "__main__":
    handler = SlowSinkHandler()
    listener = None
    if "--queue" in sys.argv:
        records: queue.Queue = queue.Queue()
        listener = logging.handlers.QueueListener(records, handler)
        listener.start()
        handler = logging.handlers.QueueHandler(records)
    logging.getLogger("app").addHandler(handler)
    logging.getLogger("app").propagate = False
    started = time.perf_counter()
    asyncio.run(main())
    elapsed = time.perf_counter() - started
    if listener is not None:
        listener.stop()
    print(f"48 log calls from 6 coroutines: the loop finished in {elapsed:.3f} s")
