"""Which tests a pull request's job profiles on its head and its base commit
(services/jobs/commit_profiles.py): a gate's regressed tests, the largest first, in the
gate's configuration, at most regression_profile_max_tests."""

from __future__ import annotations

import sys

from services.jobs import commit_profiles, gate
from services.models import Job, JobKind
from services.thresholds import Thresholds


def test_a_gates_regressed_tests_are_profiled_the_largest_first_in_its_configuration():
    result = gate.GateResult("cpuset=0-1", "main", 9)
    rows = [
        ("test_a.py::test_twice", gate.REGRESSED, 2.0, [0.2, 0.21, 0.19, 0.2]),
        ("test_a.py::test_same", gate.UNCHANGED, 1.0, [0.1]),
        ("test_a.py::test_thrice", gate.REGRESSED, 3.0, [0.3, 0.31, 0.29, 0.3]),
        ("test_a.py::test_new", gate.NEW, None, [0.1]),
    ]
    for test, verdict, ratio, fresh in rows:
        result.tests.append(gate.GateTest(test, verdict, 12, [2, 1], fresh, stored_median_s=0.1, ratio=ratio))
    job = Job(kind=JobKind.gate, command=[sys.executable, "-m", "pytest"], executor="local", gate=result.as_json())
    found = commit_profiles.regressed(job, Thresholds())
    assert [(test, config) for test, _, config in found] == [
        ("test_a.py::test_thrice", "cpuset=0-1"),
        ("test_a.py::test_twice", "cpuset=0-1"),
    ]
    # The head's summary is the runs the verdict rests on (the looks', not the gate's own run).
    assert found[0][1].median == 0.3 and found[0][1].n == 3
    assert commit_profiles.regressed(job, Thresholds(regression_profile_max_tests=1))[0][0] == "test_a.py::test_thrice"
