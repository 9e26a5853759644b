"""A Docker engine the chaos suite may take away: a unix-socket forwarder in front of the
real engine's socket, run as its own process.

Killing it (SIGKILL) is the engine going away as a worker sees it: every connection,
log streams included, breaks at once and new ones are refused on the socket; starting
it again is the engine coming back. The shared engine itself is never touched (other
suites and other people's containers run on it), and containers keep running on it.

    python -m tests.chaos.engine_proxy LISTEN_SOCKET TARGET_SOCKET
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading


def _pipe(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        # Half-close: a request body ends, the answer (a followed log stream) goes on.
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)


def _serve(client: socket.socket, target_path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(target_path)
    except OSError:
        client.close()
        return
    back = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
    back.start()
    _pipe(client, upstream)
    back.join()
    client.close()
    upstream.close()


def main(listen_path: str, target_path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(listen_path)  # the socket file a killed proxy left
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(listen_path)
    server.listen(64)
    print("listening", flush=True)
    while True:
        client, _ = server.accept()
        threading.Thread(target=_serve, args=(client, target_path), daemon=True).start()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
