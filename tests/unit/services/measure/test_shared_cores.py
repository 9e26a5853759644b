"""A worker in a Kubernetes pod warns at start when its cores are the whole node's."""

from __future__ import annotations

import os

from services.measure.hostload import shared_cores_warning

IN_A_POD = {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}


def test_outside_kubernetes_nothing_is_said():
    assert shared_cores_warning({}) is None


def test_a_pod_on_every_cpu_of_its_node_is_told_how_to_get_its_own():
    everything = os.sched_getaffinity(0)
    os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
    try:
        warning = shared_cores_warning(IN_A_POD)
    finally:
        os.sched_setaffinity(0, everything)
    assert warning is not None and "static CPU manager policy" in warning


def test_a_pod_with_cores_of_its_own_says_nothing():
    everything = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(everything)})  # as the static CPU manager pins a Guaranteed pod
    try:
        assert shared_cores_warning(IN_A_POD) is None
    finally:
        os.sched_setaffinity(0, everything)
