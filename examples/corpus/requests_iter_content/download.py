"""Story 2 with requests: a 400 kB body read with `iter_content(chunk_size=1)`.

Modern requests/urllib3 buffer the socket, so this is not a syscall problem: the time
is Python's, a generator step and a buffered read per byte (about 4 s of CPU here).
The diagnosis to expect is where the CPU goes (hot_path), not throttling.
`--chunk 65536` is the healthy twin.

    python download.py [--chunk N]
"""

import http.server
import sys
import threading
import time

import requests

BODY = b"z" * 400_000


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *args) -> None:
        pass


def main(chunk: int) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    started = time.perf_counter()
    response = requests.get(f"http://127.0.0.1:{server.server_port}/", stream=True, timeout=30)
    received = sum(len(piece) for piece in response.iter_content(chunk_size=chunk))
    server.shutdown()
    assert received == len(BODY)
    print(f"{received} bytes in {chunk}-byte chunks: {time.perf_counter() - started:.3f} s")


if __name__ == "__main__":
    main(int(sys.argv[sys.argv.index("--chunk") + 1]) if "--chunk" in sys.argv else 1)
