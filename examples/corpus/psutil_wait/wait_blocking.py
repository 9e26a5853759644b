"""The healthy twin of wait_psutil.py: block in waitpid until the kernel says the child is done."""

import os
import subprocess
import sys
import time

if __name__ == "__main__":
    seconds = sys.argv[1] if len(sys.argv) > 1 else "3"
    started = time.perf_counter()
    child = subprocess.Popen(["sleep", seconds])
    os.waitpid(child.pid, 0)
    print(f"child done after {time.perf_counter() - started:.3f} s")
