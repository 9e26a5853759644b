"""Healthy: a client reads 2,000 small protocol messages (about 40 bytes each) that a
peer sends 2 ms apart. Every read is small because every message is: the reads cost
microseconds against the seconds the peer takes, so buffering would save nothing.

    python3 examples/healthy/protocol_reader.py
"""

import socket
import threading
import time

MESSAGES = 2000


def peer(connection: socket.socket) -> None:
    with connection:
        for i in range(MESSAGES):
            connection.sendall(f"event {i:06d} status=ok value={i * 7:08d}\n".encode())
            time.sleep(0.002)


if __name__ == "__main__":
    ours, theirs = socket.socketpair()
    sender = threading.Thread(target=peer, args=(theirs,))
    started = time.perf_counter()
    sender.start()
    received = 0
    with ours:
        while chunk := ours.recv(4096):
            received += chunk.count(b"\n")
    sender.join()
    print(f"{received} messages in {time.perf_counter() - started:.3f} s")
