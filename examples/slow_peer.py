"""off_cpu_wait: a client that spends its time waiting on a slow peer, not computing.

A local server trickles its answer (a small chunk every 50 ms); the client reads it
with small recv() calls. Wall time is over a second, CPU time a few milliseconds.

    python3 examples/slow_peer.py
"""

import socket
import threading
import time

CHUNKS = 24


def serve(listener: socket.socket) -> None:
    connection, _ = listener.accept()
    with connection:
        for _ in range(CHUNKS):
            connection.sendall(b"x" * 64)
            time.sleep(0.05)


def main() -> float:
    listener = socket.create_server(("127.0.0.1", 0))
    server = threading.Thread(target=serve, args=(listener,))
    server.start()
    started = time.perf_counter()
    received = 0
    with socket.create_connection(listener.getsockname()) as client:
        while chunk := client.recv(16):
            received += len(chunk)
    server.join()
    listener.close()
    assert received == CHUNKS * 64
    return time.perf_counter() - started


if __name__ == "__main__":
    print(f"received the answer in {main():.3f} s")
