"""The test x configuration matrix of a finished job, shaped from its v1 report."""

from __future__ import annotations

from dataclasses import dataclass

from services.jobs.report_schema import Report
from services.jobs.summaries import Page

# Colour bands by slowdown against the row's fastest configuration; 2x is where the
# cpu_sensitivity rule starts to speak, so the first warm colour begins there.
BANDS = ((1.25, "heat-0"), (2.0, "heat-1"), (4.0, "heat-2"), (10.0, "heat-3"))


def heat(ratio: float | None) -> str:
    if ratio is None:
        return "heat-none"
    for limit, name in BANDS:
        if ratio < limit:
            return name
    return "heat-4"


@dataclass
class Cell:
    median: float | None
    n: int
    ratio: float | None

    @property
    def css(self) -> str:
        return heat(self.ratio)


@dataclass
class Row:
    test_id: str | None  # None: the whole command
    cells: list[Cell]

    @property
    def spread(self) -> float:
        ratios = [c.ratio for c in self.cells if c.ratio is not None]
        return max(ratios) if ratios else 0.0


def _row(test_id: str | None, medians: dict[str, tuple[float | None, int]], labels: list[str]) -> Row:
    # A median is only of the runs it was taken of: a cell with none (n=0: every run
    # failed, or none ran there) shows no median and no ratio, and is no row's fastest
    # (tests/unit/test_matrix_cells.py).
    measured = {label: (median if n else None, n) for label, (median, n) in medians.items()}
    known = [m for m, _ in measured.values() if m]
    fastest = min(known) if known else None
    cells = []
    for label in labels:
        median, n = measured.get(label, (None, 0))
        cells.append(Cell(median, n, median / fastest if median and fastest else None))
    return Row(test_id, cells)


def build_matrix(report: Report | Page) -> tuple[list[str], list[Row]]:
    """Column labels and rows: the whole command first, then tests, widest spread first;
    of the job page's digest (its tests with a finding, the widest and the slowest) or of
    the whole report (the job's paged test list)."""
    labels = [c.label for c in report.configs]
    # The command's n: the successful runs its median is of, not every run (failed ones too).
    command = _row(
        None, {c.label: (c.wall_s.median, c.wall_s.n) if c.wall_s else (None, 0) for c in report.configs}, labels
    )
    tests = [_row(t.id, {c.label: (c.median, c.n or 0) for c in t.configs}, labels) for t in report.tests]
    tests.sort(key=lambda row: -row.spread)
    return labels, [command, *tests]
