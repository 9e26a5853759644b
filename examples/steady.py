"""Latency that does not depend on the CPU configuration: a program that mostly waits.

It writes, syncs and reads back a small file and sleeps between rounds, using a few
milliseconds of CPU in all, so one core, two cores or half a core all take the same
~0.3 s.

    python3 examples/steady.py
"""

import os
import tempfile
import time


def main(rounds: int = 15) -> float:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "data")
        for _i in range(rounds):
            with open(path, "wb") as handle:
                handle.write(os.urandom(4096))
            with open(path, "rb") as handle:
                handle.read()
            time.sleep(0.02)
    return time.perf_counter() - started


if __name__ == "__main__":
    print(f"steady work took {main():.3f} s")
