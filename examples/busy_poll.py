"""busy_polling: waiting for a child process by waking up every millisecond to check.

The loop asks "done yet?" a thousand times a second (a WNOHANG wait and a 1 ms sleep
each time) instead of blocking until the child exits, as subprocess and psutil waits
with a timeout did for years (DESIGN.md story 4).

    python3 examples/busy_poll.py
"""

import subprocess
import sys
import time


def wait_by_polling(child: subprocess.Popen) -> int:
    while (code := child.poll()) is None:
        time.sleep(0.001)
    return code


if __name__ == "__main__":
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.2)"])
    wait_by_polling(child)
    print(f"child finished after {time.perf_counter() - started:.3f} s")
