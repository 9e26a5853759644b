"""The CPU work that made progress (services/measure/useful_work.py), on numbers measured here:
medians of 5 interleaved runs per configuration, local executor, 2 cores."""

from __future__ import annotations

import math

import pytest

from services.measure.useful_work import Measured, useful_share, useful_work

# examples/corpus/numpy_blas_pool: numpy 1.26.4's OpenBLAS pool (two threads on two cores,
# one pinned to one core), 2,000 128x128 products with Python work between them.
BLAS = [Measured("cpuset=0", 1.0, 1.244, 1.240), Measured("cpuset=0-1", 2.0, 1.035, 2.031)]
# examples/pool_quota.py: a process pool of os.cpu_count() workers computing for real.
POOL = [Measured("cpuset=0", 1.0, 0.379, 0.378), Measured("cpuset=0-1", 2.0, 0.233, 0.373)]


def test_cpu_beyond_what_the_speedup_bought_is_spinning():
    work = useful_work(BLAS)
    assert work is not None and work.label == "cpuset=0"
    assert work.cpu_s == pytest.approx(1.240)
    assert work.speedup["cpuset=0-1"] == pytest.approx(1.244 / 1.035)
    # 1.2x faster for 2.0 CPUs: what the second thread burned beyond the speedup bought nothing.
    assert work.spinning_s["cpuset=0-1"] == pytest.approx(2.031 - 1.240, abs=1e-3)


def test_a_pool_computing_for_real_keeps_its_cpu_time_as_work():
    work = useful_work(POOL)
    assert work is not None
    # Less CPU on two cores than on one: the least measurement of the same work is the work.
    assert work.cpu_s == pytest.approx(0.373) and work.label == "cpuset=0-1"
    assert work.spinning_s["cpuset=0-1"] == 0.0


def test_the_spinning_grows_with_the_cpu_time_that_buys_no_speedup():
    # The same speedup at more CPU time: only the excess is spinning, the work stays.
    base = useful_work([Measured("one", 1.0, 1.0, 1.0), Measured("two", 2.0, 0.8, 1.2)])
    more = useful_work([Measured("one", 1.0, 1.0, 1.0), Measured("two", 2.0, 0.8, 1.6)])
    assert base is not None and more is not None
    assert base.cpu_s == more.cpu_s == 1.0
    assert more.spinning_s["two"] - base.spinning_s["two"] == pytest.approx(0.4)


def test_waiting_is_the_narrowest_run_off_every_cpu():
    sleeper = useful_work([Measured("cpuset=0", 1.0, 1.5, 0.5), Measured("all", math.inf, 1.5, 0.5)])
    assert sleeper is not None and sleeper.waiting_s == pytest.approx(1.0)
    blas = useful_work(BLAS)
    assert blas is not None and blas.waiting_s == pytest.approx(0.004)


def test_the_useful_share_of_an_oversubscribed_pool_is_its_speedup_not_its_busy_cpus():
    # 1.96 CPUs busy on two cores, of which 1.2 did work: a quota's time to beat stretches by 1.2.
    assert useful_share(BLAS, "cpuset=0-1") == pytest.approx(1.240 / 1.035)
    assert useful_share(POOL, "cpuset=0-1") == pytest.approx(0.373 / 0.233)
    assert useful_share(BLAS, "cpus=0.5") is None


def test_without_a_configuration_there_is_no_work():
    assert useful_work([]) is None
    assert useful_work([Measured("cpuset=0", 1.0, 0.0, 0.0)]) is None
