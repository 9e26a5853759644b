"""The job page's matrix (web/matrix.py): a cell with no successful run shows no median
and no ratio, and no such cell is the row's fastest."""

from __future__ import annotations

from services.jobs.report_schema import parse_report
from tests.unit.services.jobs.test_report_schema import _minimal_report
from web.matrix import build_matrix

RUN = {
    **{"wall_s": 1.25, "user_s": 1.2, "sys_s": 0.05, "max_rss_kb": 1, "voluntary_ctx_switches": 1},
    **{"involuntary_ctx_switches": 1, "exit_code": 0, "timed_out": False, "nr_periods": None},
    **{"nr_throttled": None, "throttled_s": None, "foreign_cpus": 0.0, "read_syscalls": None, "read_bytes": None},
}


def _config(label: str, median: float, n: int) -> dict:
    interval = {"median": median, "ci_low": median, "ci_high": median, "n": n, "confidence": 0.9}
    return {"label": label, "cpus": None, "cpuset": label.split("=")[1], "runs": [RUN] * 3, "wall_s": interval}


def test_a_cell_without_a_successful_run_shows_no_median_and_no_ratio():
    tests = [
        {
            "id": "t.py::test_a",
            "configs": [
                {"label": "cpuset=0", "runs": [], "median": 0.01, "n": 0},  # failed in every run
                {"label": "cpuset=0-1", "runs": [0.4, 0.4], "median": 0.4, "n": 2},
                {"label": "cpus=0.5", "runs": [0.8, 0.8], "median": 0.8, "n": 2},
            ],
        }
    ]
    configs = [_config("cpuset=0", 1.25, 0), _config("cpuset=0-1", 4.0, 3), _config("cpus=0.5", 2.0, 3)]
    labels, [command, test] = build_matrix(parse_report(_minimal_report(configs=configs, tests=tests)))
    assert labels == ["cpuset=0", "cpuset=0-1", "cpus=0.5"]
    empty = test.cells[0]
    assert (empty.median, empty.n, empty.ratio) == (None, 0, None)
    # The fastest is of the cells that measured something: 0.8 s is 2x the 0.4 s.
    assert [cell.ratio for cell in test.cells[1:]] == [1.0, 2.0]
    # The command's n is its median's runs, not every run it made.
    assert (command.cells[0].median, command.cells[0].n, command.cells[0].ratio) == (None, 0, None)
    assert [cell.n for cell in command.cells[1:]] == [3, 3] and command.cells[2].ratio == 1.0
