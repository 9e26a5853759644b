"""A simulation loop: small matrix products with Python bookkeeping between them.

numpy's wheels bundle OpenBLAS, whose thread pool is sized to the CPUs the process may
run on (sched_getaffinity: two here, one when pinned to one core), not to a CPU quota.
Between two products its idle threads spin, yielding in a loop, waiting for the next
call: on two free cores that costs nothing but CPU time (1.2x faster for 2.0 CPUs), under
cpus=0.5 the spinning eats the quota that the computing thread needed.

    python blas_pool.py                          # the pool as OpenBLAS sizes it
    OPENBLAS_NUM_THREADS=1 python blas_pool.py   # the fix: one thread, the quota's size
"""

import time

import numpy as np

SIZE, STEPS, BOOKKEEPING = 128, 2000, 2000

rng = np.random.default_rng(0)
state = rng.standard_normal((SIZE, SIZE)) / SIZE
step = rng.standard_normal((SIZE, SIZE)) / SIZE
started = time.perf_counter()
trace = 0.0
for _ in range(STEPS):
    product = state @ step
    trace += float(product[0, 0])
    total = 0
    for i in range(BOOKKEEPING):  # the per-step bookkeeping a real loop does in Python
        total += i * i
print(f"{STEPS} steps of {SIZE}x{SIZE} in {time.perf_counter() - started:.3f} s (trace {trace:.3e})")
