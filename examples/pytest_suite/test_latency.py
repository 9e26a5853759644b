"""A small suite with one CPU-sensitive test among healthy ones.

lagtrace run --config cpuset=0 --config cpuset=0-1 -- python3 -m pytest -q test_latency.py
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from handoff import round_trips


def test_handoff_round_trips():
    # Slow on two cores, fast on one: the test lagtrace should flag.
    assert round_trips(100) > 0


def test_waits_for_a_timer():
    started = time.perf_counter()
    time.sleep(0.05)
    assert time.perf_counter() - started >= 0.05


def test_small_computation():
    assert sum(i * i for i in range(20_000)) == 2666466670000
