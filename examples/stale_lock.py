"""latency_flaky: some runs find a lock left behind and wait for it to go stale.

Every third run leaves its lock file behind, as a crashing tool would; the run after
it finds the lock and waits for it to expire. Under identical CPU conditions the runs
then fall into two groups, ~0.05 s and ~0.45 s. (The pattern follows a run counter,
so screen it in one configuration: `--config cpuset=0-1 --repeat 6`.)

    python3 examples/stale_lock.py [STATE_DIR]
"""

import os
import sys
import tempfile
import time

STALE_AFTER_S = 0.4


def main(state_dir: str) -> None:
    os.makedirs(state_dir, exist_ok=True)
    lock = os.path.join(state_dir, "lock")
    counter = os.path.join(state_dir, "runs")
    runs = 0
    if os.path.exists(counter):
        with open(counter) as handle:
            runs = int(handle.read())
    with open(counter, "w") as handle:
        handle.write(str(runs + 1))
    if os.path.exists(lock):
        time.sleep(STALE_AFTER_S)  # wait for the previous run's lock to go stale
        os.remove(lock)
    time.sleep(0.05)  # the real work
    if runs % 3 == 0:
        open(lock, "w").close()  # leave the lock behind, as a crash would


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(tempfile.gettempdir(), "lagtrace-stale-lock"))
