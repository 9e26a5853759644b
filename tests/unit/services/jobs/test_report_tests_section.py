"""The text report of a suite of real size: the flagged tests and the slowest few, how
many were cleared, `--all` for every one (the JSON keeps them all regardless)."""

from __future__ import annotations

from services.jobs.report_schema import Report, parse_report
from services.jobs.report_text import SLOWEST_SHOWN, render_text
from tests.unit.services.jobs.test_report_schema import _minimal_report

LABELS = ("cpuset=0", "cpuset=0-1")


def _test(number: int, seconds: float, **flags) -> dict:
    return {
        "id": f"t.py::test_{number:04d}",
        "line": None,
        "cleared": flags.get("cleared", False),
        "left_out": flags.get("left_out", False),
        "configs": [{"label": label, "median": seconds, "runs": [seconds]} for label in LABELS],
    }


def _report(tests: list[dict], flagged: list[str], budget: dict | None = None) -> Report:
    finding = {
        "id": 1,
        "kind": "cpu_sensitivity",
        "severity": "high",
        "title": "slow",
        "detail": "slower",
        "config": None,
        "metrics": {},
        "evidence": [],
        "fingerprint": "f",
        "status": "new",
        "regression": False,
    }
    return parse_report(
        _minimal_report(
            findings=[{**finding, "test": test} for test in flagged],
            configs=[{"label": label, "cpus": None, "cpuset": None, "wall_s": None, "runs": []} for label in LABELS],
            tests=tests,
            budget=budget,
        )
    )


def _listed(text: str) -> list[str]:
    return [line.split()[0] for line in text.splitlines() if line.strip().startswith("t.py::")]


def test_a_suite_lists_its_flagged_tests_and_the_slowest_few_then_counts_the_rest():
    # 600 tests: 590 cleared by the survey, 8 screened without a finding, 2 flagged (one of them fast).
    tests = [_test(n, 0.001 * (n % 100), cleared=True) for n in range(590)]
    tests += [_test(n, 0.05) for n in range(590, 598)] + [_test(598, 0.002), _test(599, 0.3)]
    flagged = ["t.py::test_0598", "t.py::test_0599"]
    text = render_text(_report(tests, flagged))
    listed = _listed(text)
    assert listed[:2] == flagged  # findings first, however fast
    assert len(listed) == 2 + SLOWEST_SHOWN
    assert listed[2:] == sorted(
        listed[2:], key=lambda test: -next(t for t in tests if t["id"] == test)["configs"][0]["median"]
    )
    assert (
        "598 tests cleared (590 by the survey alone (one run per configuration), 8 screened without a finding); "
        "593 not listed here: `--all` lists every test" in text
    )


def test_all_lists_every_test_and_marks_how_far_each_got():
    tests = [_test(0, 0.1, cleared=True), _test(1, 0.2), _test(2, 0.3, left_out=True), _test(3, 0.01)]
    text = render_text(_report(tests, ["t.py::test_0003"]), all_tests=True)
    assert _listed(text) == ["t.py::test_0003", "t.py::test_0002", "t.py::test_0001", "t.py::test_0000"]
    assert "t.py::test_0000 (survey only)" in text and "t.py::test_0002 (left out by the budget)" in text
    assert "tests cleared" not in text


def test_what_the_budget_left_out_is_said_after_the_tests():
    budget = {
        "limit_s": 60.0,
        "given": True,
        "spent_s": 58.2,
        "left_out": {
            "tests": ["t.py::test_0002"],
            "rounds": [],
            "census": ["cpuset=0-1"],
            "drill": ["x in cpuset=0: strace"],
        },
    }
    tests = [_test(1, 0.2), _test(2, 0.3, left_out=True)]
    text = render_text(_report(tests, [], budget))
    assert "1 tests cleared (1 screened without a finding); 1 left out by the budget, unjudged" in text
    assert "Budget: the runs took 58.2 s of 60.0 s (asked for)" in text
    assert "left out of the focused screen (least suspicious first): 1 tests: t.py::test_0002" in text
    assert "left out: the census (in cpuset=0-1)" in text and "left out of the drill: x in cpuset=0: strace" in text


def test_the_budget_line_says_what_the_job_cost_against_the_suites_own_time():
    budget = {
        "limit_s": 316.6,
        "given": False,
        "spent_s": 271.4,
        "left_out": {"tests": [], "rounds": [], "census": [], "drill": []},
        "suite_s": 34.3,
        "cost_ratio": 7.91,
    }
    text = render_text(_report([_test(1, 0.2)], [], budget))
    assert (
        "Budget: the runs took 271.4 s of 316.6 s (the default: a multiple of the suite's own time): "
        "7.9x the suite's own time (34.3 s)" in text
    )
    # No run measured the suite (a job that failed to start): no cost line, no section.
    unmeasured = {**budget, "limit_s": None, "suite_s": None, "cost_ratio": None}
    assert "Budget:" not in render_text(_report([_test(1, 0.2)], [], unmeasured))
