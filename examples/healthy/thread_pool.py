"""Healthy: a thread pool whose work releases the GIL (hashing and compressing large
buffers), fed in bursts, so its workers sleep in futex between jobs. A few hundred futex
calls, no storm: the threads compute in parallel where there are cores, and wait for
work where there is none.

    python3 examples/healthy/thread_pool.py
"""

import hashlib
import os
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

BLOCK = os.urandom(1 << 20)


def work(i: int) -> int:
    digest = hashlib.sha256(BLOCK * 2).digest()
    return len(zlib.compress(BLOCK[: 1 << 18], 1)) + digest[0] + i


if __name__ == "__main__":
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=4) as pool:
        for _burst in range(10):
            list(pool.map(work, range(8)))
            time.sleep(0.03)
    print(f"80 jobs in bursts of 8 on 4 threads: {time.perf_counter() - started:.3f} s")
