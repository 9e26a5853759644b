"""The census's trace, split at the test boundaries its plugin marks."""

from __future__ import annotations

from services.evidence import CensusContent
from services.measure.probes import census
from services.thresholds import Thresholds

TRACE = """\
100 read(3</usr/lib/python3.11/os.py>, ""..., 4096) = 4096
100 lseek(7</dev/null>, 1, SEEK_SET) = 1
100 clock_nanosleep(CLOCK_REALTIME, 0, {tv_sec=0, tv_nsec=500000}, NULL) = 0
100 clock_nanosleep(CLOCK_REALTIME, 0, {tv_sec=0, tv_nsec=500000}, NULL) = 0
100 lseek(7</dev/null>, 2, SEEK_SET) = 2
100 read(3</tmp/x>, ""..., 4096) = 12
100 lseek(7</dev/null>, 3, SEEK_SET) = 3
101 recvfrom(5<UNIX:[1234]>, ""..., 1, 0, NULL, NULL) = 1
101 recvfrom(5<UNIX:[1234]>, ""..., 1, 0, NULL, NULL <unfinished ...>
100 nanosleep({tv_sec=0, tv_nsec=1000}, NULL) = 0
101 <... recvfrom resumed>) = 1
101 recvfrom(5<UNIX:[1234]>, ""..., 1, 0, NULL, NULL) = 0
100 lseek(7</dev/null>, 4, SEEK_SET) = 4
"""


def test_calls_between_a_test_s_marks_are_its_own_whichever_process_made_them():
    tests = census.parse(TRACE.splitlines(), {0: "t.py::test_sleeps", 1: "t.py::test_reads"})
    assert tests["t.py::test_sleeps"] == {"sleeps": 2, "reads": {}}
    # Two reads with data (one resumed), the EOF read not counted; a sleep of the other pid.
    assert tests["t.py::test_reads"] == {"sleeps": 1, "reads": {"socket": {"reads": 2, "median_bytes": 1}}}
    # Start-up's read of os.py and the read between the tests belong to no test.
    assert set(tests) == {"t.py::test_sleeps", "t.py::test_reads"}


def test_suspects_are_tests_that_poll_at_busy_polling_s_rate_or_read_in_tiny_pieces():
    content = CensusContent.model_validate(
        {
            "tests": {
                "t::polls": {"sleeps": 600, "reads": {}},
                "t::sleeps_once_in_a_while": {"sleeps": 30, "reads": {}},
                "t::reads_bytes": {"sleeps": 0, "reads": {"socket": {"reads": 30000, "median_bytes": 1}}},
                "t::reads_blocks": {"sleeps": 0, "reads": {"file": {"reads": 30000, "median_bytes": 4096}}},
            }
        }
    )
    durations = {"t::polls": 0.3, "t::sleeps_once_in_a_while": 10.0, "t::reads_bytes": 0.03, "t::reads_blocks": 0.2}
    assert census.suspects(content, durations, Thresholds()) == ["t::polls", "t::reads_bytes"]


XDIST_TRACE = """\
200 lseek(7</dev/null>, 1, SEEK_SET) = 1
300 lseek(7</dev/null>, 3, SEEK_SET) = 3
200 nanosleep({tv_sec=0, tv_nsec=1000}, NULL) = 0
300 recvfrom(5<UNIX:[1]>, ""..., 1, 0, NULL, NULL) = 1
400 nanosleep({tv_sec=0, tv_nsec=1000}, NULL) = 0
200 lseek(7</dev/null>, 2, SEEK_SET) = 2
200 nanosleep({tv_sec=0, tv_nsec=1000}, NULL) = 0
"""


def test_two_workers_running_tests_at_once_keep_their_calls_apart():
    # pytest-xdist: each worker marks its own test; pid 400 (a subprocess) marks none and
    # its call goes to the test that started last; after its end a worker's calls are no test's.
    tests = census.parse(XDIST_TRACE.splitlines(), {0: "a", 1: "b"})
    assert tests["a"] == {"sleeps": 1, "reads": {}}
    assert tests["b"] == {"sleeps": 1, "reads": {"socket": {"reads": 1, "median_bytes": 1}}}


def test_the_run_s_cost_of_a_traced_call_is_what_its_plugin_timed_the_largest_of_its_processes(tmp_path):
    ids = tmp_path / census.IDS_FILE
    ids.write_text("traced_call_s\t0.00019\n0\tt.py::test_a\ntraced_call_s\t0.00021\ntraced_call_s\tjunk\n")
    assert census.traced_call_s(ids) == 0.00021
    assert census.read_names(ids) == {0: "t.py::test_a"}
    assert census.traced_call_s(tmp_path / "missing.txt") is None
