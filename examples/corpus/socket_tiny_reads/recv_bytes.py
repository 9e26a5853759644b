"""Story 2 without a library: a client reading a 300 kB answer one byte per recv().

A server thread sends the body in one go; the client calls `recv(1)` until the peer
closes, 300,000 syscalls that /proc/PID/io does not count (socket reads are not in
syscr). `--chunk 65536` is the healthy twin.

    python recv_bytes.py [--chunk N]
"""

import socket
import sys
import threading
import time

BODY = b"x" * 300_000


def serve(listener: socket.socket) -> None:
    connection, _ = listener.accept()
    with connection:
        connection.sendall(BODY)


def main(chunk: int) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=serve, args=(listener,), daemon=True).start()
    started = time.perf_counter()
    received = 0
    with socket.create_connection(listener.getsockname()) as client:
        while data := client.recv(chunk):
            received += len(data)
    assert received == len(BODY)
    print(f"{received} bytes in {chunk}-byte reads: {time.perf_counter() - started:.3f} s")


if __name__ == "__main__":
    main(int(sys.argv[sys.argv.index("--chunk") + 1]) if "--chunk" in sys.argv else 1)
