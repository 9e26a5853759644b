"""Story 4 in the standard library: CPython 3.11's `Popen.wait(timeout)` polls.

With a timeout, `subprocess.Popen._wait` loops over a WNOHANG waitpid and sleeps that
double up to 50 ms; without one it blocks in waitpid. Pass `--blocking` for the twin.

    python popen_wait.py [--blocking]
"""

import subprocess
import sys
import time

if __name__ == "__main__":
    started = time.perf_counter()
    child = subprocess.Popen(["sleep", "3"])
    if "--blocking" in sys.argv:
        child.wait()
    else:
        child.wait(timeout=60)
    print(f"child done after {time.perf_counter() - started:.3f} s")
