"""The corpus scoreboard (`make accuracy`): what fails a run and what counts against precision."""

from __future__ import annotations

from pathlib import Path

from tests.accuracy.corpus import Outcome, Side, load_cases, score


def side(variant: str, expect: list[str], tolerate: tuple[str, ...] = ()) -> Side:
    return Side("case", variant, Path("."), ["python", "prog.py"], expect, list(tolerate), None, "python3")


def test_a_healthy_twin_fails_on_a_medium_finding_even_where_its_case_tolerates_the_kind():
    twin = side("healthy", [], tolerate=("off_cpu_wait",))
    assert Outcome(twin, [("off_cpu_wait", "medium")], 1.0).failed
    assert not Outcome(twin, [("off_cpu_wait", "low")], 1.0).failed
    assert Outcome(side("healthy", []), [("hot_path", "high")], 1.0).failed


def test_a_pathology_fails_only_when_its_kind_is_missed():
    pathology = side("pathology", ["busy_polling"])
    assert Outcome(pathology, [("off_cpu_wait", "low")], 1.0).failed
    assert not Outcome(pathology, [("busy_polling", "low"), ("hot_path", "high")], 1.0).failed


def test_precision_counts_every_untolerated_finding_at_any_severity():
    outcomes = [
        Outcome(
            side("pathology", ["tiny_reads"], tolerate=("hot_path",)),
            [("tiny_reads", "medium"), ("hot_path", "low")],
            1,
        ),
        Outcome(side("pathology", ["tiny_reads"]), [("off_cpu_wait", "low")], 1),
        Outcome(side("healthy", []), [("tiny_reads", "low")], 1),
    ]
    table = score(outcomes)
    assert (table["tiny_reads"]["tp"], table["tiny_reads"]["fn"], table["tiny_reads"]["fp"]) == (1, 1, 1)
    assert table["tiny_reads"]["precision"] == 0.5 and table["tiny_reads"]["recall"] == 0.5
    assert table["off_cpu_wait"]["precision"] == 0.0 and table["off_cpu_wait"]["recall"] is None
    assert "hot_path" not in table


def test_every_corpus_case_loads_and_each_pathology_expects_a_kind():
    cases = load_cases()
    assert {"psutil_wait", "starlette_websocket", "jsonschema_suite"} <= set(cases)
    for _, sides in cases.values():
        assert sides
        assert all(s.expect for s in sides if s.variant == "pathology")
        assert all(not s.expect for s in sides if s.variant == "healthy")


def test_a_pathology_whose_diagnosis_names_another_cause_fails():
    handoff = Side("handoff", "pathology", Path("."), ["python", "h.py"], ["cpu_sensitivity"], [], None, "python3")
    handoff.expect_cause = "gil_contention"
    found = [("cpu_sensitivity", "high"), ("futex_storm", "high")]
    assert Outcome(handoff, found, 1.0, causes=["futex_storm"]).failed
    right = Outcome(handoff, found, 1.0, causes=["gil_contention"])
    assert not right.failed and right.cause_right


def test_cause_accuracy_counts_the_sides_that_expect_a_cause():
    from tests.accuracy.corpus import cause_accuracy

    expecting = Side(
        "a", "pathology", Path("."), ["python"], ["cpu_sensitivity"], [], None, "python3", "gil_contention"
    )
    other = side("pathology", ["tiny_reads"])
    outcomes = [
        Outcome(expecting, [("cpu_sensitivity", "high")], 1.0, causes=["gil_contention"]),
        Outcome(expecting, [("cpu_sensitivity", "high")], 1.0, causes=[]),
        Outcome(other, [("tiny_reads", "high")], 1.0, causes=["tiny_reads"]),
    ]
    assert cause_accuracy(outcomes) == {"gil_contention": (1, 1, 2)}


def test_a_cause_filed_under_a_test_where_the_case_expects_the_whole_command_is_a_wrong_attribution():
    program = Side("ws", "pathology", Path("."), ["python"], ["tiny_reads"], [], None, "python3", "tiny_reads")
    found = [("tiny_reads", "medium")]
    on_command = Outcome(program, found, 1.0, causes=["tiny_reads"], cause_tests=[None])
    assert on_command.attributed and not on_command.failed
    on_a_test = Outcome(program, found, 1.0, causes=["tiny_reads"], cause_tests=["t.py::test_x"])
    assert on_a_test.cause_right and on_a_test.attributed is False and on_a_test.failed
    # A case naming its test: the cause on that test (a --pyargs id ends with it) is right.
    program.expect_cause_test = "tests/t.py::test_x"
    on_its_test = Outcome(program, found, 1.0, causes=["tiny_reads"], cause_tests=["/venv/pkg/tests/t.py::test_x"])
    assert on_its_test.attributed and not on_its_test.failed
    assert Outcome(program, found, 1.0, causes=["tiny_reads"], cause_tests=[None]).failed


def test_a_cause_must_also_say_where_when_the_case_asks():
    websocket = Side("ws", "pathology", Path("."), ["python"], ["cpu_sensitivity"], [], None, "python3", "hot_path")
    websocket.expect_cause_in = "testclient.py"
    found = [("cpu_sensitivity", "low"), ("hot_path", "low")]
    pytest_frames = "t spends 80% of its samples in getfixturemarker (fixtures.py:1163)"
    assert Outcome(websocket, found, 1.0, causes=["hot_path"], cause_texts=[pytest_frames]).failed
    library = "t spends 0.015 s more per run in WebSocketTestSession._asgi_receive (testclient.py:163)"
    assert Outcome(websocket, found, 1.0, causes=["hot_path"], cause_texts=[library]).cause_right


def test_a_cause_must_belong_to_its_test_when_the_case_names_one():
    suite = Side("s", "pathology", Path("."), ["python"], ["event_loop_blocked"], [], None, "python3")
    suite.expect_cause, suite.expect_cause_test = "event_loop_blocked", "test_cache.py::test_refresh_then_lookup"
    found = [("event_loop_blocked", "medium")]
    on_command = Outcome(suite, found, 1.0, causes=["event_loop_blocked"], cause_texts=[""], cause_tests=[None])
    assert on_command.failed and not on_command.cause_right
    on_test = Outcome(
        suite, found, 1.0, causes=["event_loop_blocked"], cause_texts=[""], cause_tests=[suite.expect_cause_test]
    )
    assert on_test.cause_right and not on_test.failed
    # --pyargs names a test by its path in the case's venv: the id's end is what counts.
    in_venv = f".state/accuracy/venvs/0a1b/lib/python3.11/site-packages/{suite.expect_cause_test}"
    assert Outcome(
        suite, found, 1.0, causes=["event_loop_blocked"], cause_texts=[""], cause_tests=[in_venv]
    ).cause_right
    elsewhere = "other_test_cache.py::test_refresh_then_lookup"
    assert not Outcome(
        suite, found, 1.0, causes=["event_loop_blocked"], cause_texts=[""], cause_tests=[elsewhere]
    ).cause_right


def test_a_forbidden_kind_at_medium_fails_a_pathology_that_found_its_own():
    suite = side("pathology", ["command_failed"])
    suite.forbid = ["cpu_sensitivity"]
    assert not Outcome(suite, [("command_failed", "medium"), ("cpu_sensitivity", "low")], 1.0).failed
    assert Outcome(suite, [("command_failed", "medium"), ("cpu_sensitivity", "medium")], 1.0).failed
