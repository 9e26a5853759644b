"""numpy_blas_pool's simulation loop, its BLAS pool sized by the program itself.

threadpoolctl sets OpenBLAS's thread count at run time (openblas_set_num_threads), after
the library read OPENBLAS_NUM_THREADS at load: the limit given here wins whatever the
environment says, as in a library that tunes its own BLAS.

    python pinned_pool.py 2   # two threads, whatever the quota
    python pinned_pool.py 1   # the fix: the quota's one thread
"""

import sys
import time

import numpy as np
from threadpoolctl import threadpool_limits

SIZE, STEPS, BOOKKEEPING = 128, 2000, 2000

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
with threadpool_limits(limits=threads, user_api="blas"):
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
    print(f"{threads} BLAS threads: {STEPS} steps in {time.perf_counter() - started:.3f} s (trace {trace:.3e})")
