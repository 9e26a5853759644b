"""slow_startup: the program's work takes milliseconds, its imports over a second.

`plugins` scans for plugins at import time and waits for each to answer; the useful
work after that is tiny. `-X importtime` names the culprit.

    python3 examples/slow_startup/main.py
"""

import time

import plugins  # noqa: F401  (the slow part: see plugins.py)

if __name__ == "__main__":
    started = time.perf_counter()
    total = sum(range(10_000))
    print(f"work done in {time.perf_counter() - started:.4f} s (total {total})")
