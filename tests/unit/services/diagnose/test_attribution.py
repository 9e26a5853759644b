"""Which test a frame names (services/diagnose/attribution.py)."""

from __future__ import annotations

from services.diagnose.attribution import named_test, task_frames

TESTS = [
    "tests/test_cache.py::test_refresh_then_lookup",
    "tests/test_cache.py::TestLookup::test_refresh_then_lookup",
    "tests/test_cache.py::test_param[a]",
    "tests/test_cache.py::test_param[b]",
    "tests/unit/test_cache.py::test_alone",
]


def test_a_coroutine_in_the_tests_file_names_the_test():
    frames = task_frames("Task test_refresh_then_lookup (/workspace/tests/test_cache.py:11)", [])
    assert named_test(frames, TESTS) == "tests/test_cache.py::test_refresh_then_lookup"


def test_a_method_is_told_from_a_function_of_the_same_name_by_its_class():
    frames = task_frames("Task TestLookup.test_refresh_then_lookup (/srv/x/tests/test_cache.py:30)", [])
    assert named_test(frames, TESTS) == "tests/test_cache.py::TestLookup::test_refresh_then_lookup"


def test_a_frame_on_the_stack_names_the_test_when_the_task_is_a_helper():
    frames = task_frames(
        "Task worker (/w/app.py:4)",
        ["readinto (/usr/lib/python3.11/socket.py)", "test_alone (/w/tests/unit/test_cache.py)"],
    )
    assert named_test(frames, TESTS) == "tests/unit/test_cache.py::test_alone"


def test_parametrized_cases_share_a_function_and_are_not_guessed():
    frames = task_frames("Task test_param (/w/tests/test_cache.py:40)", [])
    assert named_test(frames, TESTS) is None


def test_a_file_of_the_same_name_elsewhere_is_not_the_tests():
    frames = task_frames("Task test_alone (/w/other/test_cache.py:3)", [])
    assert named_test(frames, TESTS) is None
    assert named_test(task_frames("Task main (/w/app.py:3)", []), TESTS) is None
