"""Healthy, though throttled: a process pool sized to the visible cores, under a CPU quota.

os.cpu_count() reports every core of the machine, not the container's or cgroup's
quota, so under `cpus=0.5` two workers burn the period's 50 ms budget in 25 ms and the
whole pool then waits for the next period. Yet the run takes its CPU time divided by the
quota, as one worker would: the quota's share, physics. On one core it takes
twice its two-core time for the same reason. lagtrace gives it no finding above low.

    python3 examples/pool_quota.py
"""

import os
import time
from concurrent.futures import ProcessPoolExecutor


def work(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i
    return total


if __name__ == "__main__":
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=os.cpu_count()) as pool:
        list(pool.map(work, [300_000] * 16))
    print(f"16 tasks on {os.cpu_count()} workers in {time.perf_counter() - started:.3f} s")
