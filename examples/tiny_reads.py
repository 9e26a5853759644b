"""tiny_reads: parsing a streamed document read one byte per system call.

A child process streams a JSON document through a pipe; the parent reads it with
os.read(fd, 1), one syscall per byte, like the HTTP client that read a response body
in 1-byte chunks (DESIGN.md story 2). Reading in 64 KiB chunks makes it ~100x cheaper.

    python3 examples/tiny_reads.py
"""

import json
import os
import subprocess
import sys
import time

PRODUCER = "import json, sys; sys.stdout.write(json.dumps({'rows': [[i, i * i] for i in range(2500)]}))"


def read_one_byte_at_a_time(fd: int) -> bytes:
    chunks = []
    while byte := os.read(fd, 1):
        chunks.append(byte)
    return b"".join(chunks)


if __name__ == "__main__":
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", PRODUCER], stdout=subprocess.PIPE)
    document = json.loads(read_one_byte_at_a_time(child.stdout.fileno()))
    child.wait()
    print(f"{len(document['rows'])} rows in {time.perf_counter() - started:.3f} s")
