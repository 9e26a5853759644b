"""Story 2 under gevent: monkey-patched sockets reading a 200 kB answer one byte at a time.

Each `recv(1)` on a patched socket is a real non-blocking recvfrom syscall (plus the
hub's bookkeeping). `--chunk 65536` is the healthy twin.

    python gevent_recv.py [--chunk N]
"""

from gevent import monkey

monkey.patch_all()

import socket  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import gevent  # noqa: E402

BODY = b"y" * 200_000


def serve(listener: socket.socket) -> None:
    connection, _ = listener.accept()
    with connection:
        connection.sendall(BODY)


def main(chunk: int) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    server = gevent.spawn(serve, listener)
    started = time.perf_counter()
    received = 0
    with socket.create_connection(listener.getsockname()) as client:
        while data := client.recv(chunk):
            received += len(data)
    server.join()
    assert received == len(BODY)
    print(f"{received} bytes in {chunk}-byte reads: {time.perf_counter() - started:.3f} s")


if __name__ == "__main__":
    main(int(sys.argv[sys.argv.index("--chunk") + 1]) if "--chunk" in sys.argv else 1)
