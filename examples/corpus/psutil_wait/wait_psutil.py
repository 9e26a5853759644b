"""Story 4: waiting for a child with psutil 5.9's `Process.wait(timeout)`.

psutil 5.x implements a wait with a timeout as a WNOHANG `waitpid` in a loop of
sleeps doubling up to 40 ms: about 28 wake-ups a second for the whole wait, at almost
no CPU.  The healthy twin blocks in `os.waitpid` (one syscall, woken by the kernel).

    python wait_psutil.py [SECONDS]
"""

import subprocess
import sys
import time

import psutil

if __name__ == "__main__":
    seconds = sys.argv[1] if len(sys.argv) > 1 else "3"
    started = time.perf_counter()
    child = subprocess.Popen(["sleep", seconds])
    psutil.Process(child.pid).wait(timeout=60)
    print(f"child done after {time.perf_counter() - started:.3f} s")
