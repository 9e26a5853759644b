"""Server-rendered SVG plots: readable without JavaScript, no chart library to vendor."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

from markupsafe import Markup, escape

WIDTH, ROW_HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 720, 46, 150, 20, 10, 36
# A log axis once the spread is this wide: a 90x hand-off would squash the fast
# configuration into one pixel on a linear axis.
LOG_ABOVE = 20.0


def _seconds(value: float) -> str:
    if value >= 1:
        return f"{value:.2f} s"
    if value >= 0.001:
        return f"{value * 1000:.1f} ms"
    return f"{value * 1e6:.0f} µs"


def _quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q3


def _ticks(low: float, high: float, log: bool) -> list[float]:
    if log:
        return [10.0**e for e in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)]
    step = 10 ** math.floor(math.log10((high - low) or high or 1))
    while (high - low) / step > 6:
        step *= 2
    start = math.floor(low / step) * step
    return [start + i * step for i in range(int((high - start) / step) + 2)]


def strip_plot(samples: dict[str, list[float]], title: str) -> Markup:
    """Every run as a dot per configuration, with the interquartile box and the median."""
    rows = [(label, sorted(v)) for label, v in samples.items() if v]
    if not rows:
        return Markup('<p class="muted">No timing runs to plot.</p>')
    everything = [value for _, values in rows for value in values]
    low, high = min(everything), max(everything)
    log = low > 0 and high / low > LOG_ABOVE
    ticks = _ticks(low, high, log)
    axis_low, axis_high = (min(ticks[0], low), max(ticks[-1], high)) if log else (min(0.0, low), ticks[-1])
    if axis_high <= axis_low:
        axis_high = axis_low + 1

    def x(value: float) -> float:
        if log:
            share = (math.log10(value) - math.log10(axis_low)) / (math.log10(axis_high) - math.log10(axis_low))
        else:
            share = (value - axis_low) / (axis_high - axis_low)
        return LEFT + share * (WIDTH - LEFT - RIGHT)

    height = TOP + ROW_HEIGHT * len(rows) + BOTTOM
    parts = [
        f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
        f'width="{WIDTH}" height="{height}" role="img" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
    ]
    axis_y = TOP + ROW_HEIGHT * len(rows)
    for tick in ticks:
        if axis_low <= tick <= axis_high:
            tx = x(tick)
            parts.append(f'<line class="grid" x1="{tx:.1f}" y1="{TOP}" x2="{tx:.1f}" y2="{axis_y}"/>')
            parts.append(
                f'<text class="tick" x="{tx:.1f}" y="{axis_y + 16}" text-anchor="middle">'
                f"{escape(_seconds(tick))}</text>"
            )
    parts.append(
        f'<text class="tick" x="{WIDTH - RIGHT}" y="{axis_y + 32}" text-anchor="end">'
        f"{'log scale' if log else 'linear scale'}</text>"
    )
    for i, (label, values) in enumerate(rows):
        middle = TOP + ROW_HEIGHT * i + ROW_HEIGHT / 2
        q1, q3 = _quartiles(values)
        median = statistics.median(values)
        parts.append(
            f'<text class="label" x="{LEFT - 10}" y="{middle + 4:.1f}" text-anchor="end">{escape(label)}</text>'
        )
        parts.append(
            f'<rect class="box" x="{x(q1):.1f}" y="{middle - 12:.1f}" width="{max(1.0, x(q3) - x(q1)):.1f}" '
            f'height="24"><title>{escape(label)}: interquartile {escape(_seconds(q1))} .. '
            f"{escape(_seconds(q3))}</title></rect>"
        )
        parts.append(
            f'<line class="median" x1="{x(median):.1f}" y1="{middle - 15:.1f}" x2="{x(median):.1f}" '
            f'y2="{middle + 15:.1f}"><title>median {escape(_seconds(median))}</title></line>'
        )
        for j, value in enumerate(values):
            # Deterministic jitter: the same job always draws the same picture.
            offset = ((j * 7) % 11 - 5) * 1.6
            parts.append(
                f'<circle class="dot" cx="{x(value):.1f}" cy="{middle + offset:.1f}" r="3.5">'
                f"<title>{escape(label)} run {j + 1}: {escape(_seconds(value))}</title></circle>"
            )
    parts.append("</svg>")
    return Markup("".join(parts))


def trend_plot(history: list[dict], labels: list[str], title: str) -> Markup:
    """Median per configuration across jobs, oldest left: is it getting worse?"""
    points = [
        (i, label, entry["medians"][label])
        for i, entry in enumerate(history)
        for label in labels
        if label in entry["medians"]
    ]
    if len(history) < 2 or not points:
        return Markup("")
    width, height, left, top, bottom = 720, 180, 60, 12, 28
    high = max(value for _, _, value in points) * 1.1 or 1.0

    def xy(i: int, value: float) -> tuple[float, float]:
        return (left + i * (width - left - 20) / (len(history) - 1), top + (1 - value / high) * (height - top - bottom))

    parts = [
        f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>',
        f'<text class="tick" x="{left - 6}" y="{top + 8}" text-anchor="end">{escape(_seconds(high))}</text>',
        f'<text class="tick" x="{left - 6}" y="{height - bottom}" text-anchor="end">0</text>',
        f'<line class="grid" x1="{left}" y1="{height - bottom}" x2="{width - 20}" y2="{height - bottom}"/>',
    ]
    for n, label in enumerate(labels):
        line = [(i, value) for i, lab, value in points if lab == label]
        if not line:
            continue
        path = " ".join(f"{'M' if k == 0 else 'L'}{xy(i, v)[0]:.1f},{xy(i, v)[1]:.1f}" for k, (i, v) in enumerate(line))
        parts.append(f'<path class="series s{n % 6}" d="{path}"><title>{escape(label)}</title></path>')
        for i, value in line:
            px, py = xy(i, value)
            parts.append(
                f'<circle class="series-dot s{n % 6}" cx="{px:.1f}" cy="{py:.1f}" r="3">'
                f"<title>job {history[i]['job_id']}, {escape(label)}: {escape(_seconds(value))}</title></circle>"
            )
    for i, entry in enumerate(history):
        px, _ = xy(i, 0)
        parts.append(f'<text class="tick" x="{px:.1f}" y="{height - 8}" text-anchor="middle">#{entry["job_id"]}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def percentile_trend_plot(
    points: list, labels: list[str], title: str, markers: list[tuple[int, str, str, str]] | None = None
) -> Markup:
    """p50 (solid) and p95 (dashed) per configuration across jobs, oldest left.

    ``points`` are catalogue.JobPoint: job_id and p50/p95 dicts by configuration label
    (of the passed runs), ``failures`` by label. One job draws as a single column of dots;
    the axis starts at 0 so a doubling reads as a doubling. Runs in which the test failed
    draw as a cross on the axis, never as latency (the time to fail is none), and a line
    breaks at a job whose every run there failed. ``markers`` (job id, label, title,
    link) draw a line just before that job's column: a change point found there
    (slower_since), linking its finding.
    """
    values = [v for p in points for series in (p.p50, p.p95) for v in series.values()]
    failed = any(p.failures for p in points)
    if not points or not (values or failed):
        return Markup('<p class="muted">No timing runs of this test to plot.</p>')
    width, height, left, right, top, bottom = 720, 200, 64, 20, 12, 30
    high = max(values, default=0.0) * 1.1 or 1.0
    count = len(points)

    def xy(i: int, value: float) -> tuple[float, float]:
        share = i / (count - 1) if count > 1 else 0.5
        return left + share * (width - left - right), top + (1 - value / high) * (height - top - bottom)

    parts = _frame("trend", title, width, height, left, right, high, xy)
    for n, label in enumerate(labels):
        for name, css in (("p50", "series"), ("p95", "series p95")):
            line = [(i, getattr(p, name)[label]) for i, p in enumerate(points) if label in getattr(p, name)]
            if not line:
                continue
            # A job in which the test only failed here has no latency: the line stops there.
            gaps = {i for i, p in enumerate(points) if p.failures.get(label) and label not in p.p50}
            moves, previous = [], None
            for i, v in line:
                jump = previous is None or any(previous < gap < i for gap in gaps)
                moves.append(f"{'M' if jump else 'L'}{xy(i, v)[0]:.1f},{xy(i, v)[1]:.1f}")
                previous = i
            path = " ".join(moves)
            parts.append(f'<path class="{css} s{n % 6}" d="{path}"><title>{escape(label)} {name}</title></path>')
            for i, value in line:
                px, py = xy(i, value)
                parts.append(
                    f'<circle class="series-dot s{n % 6}" cx="{px:.1f}" cy="{py:.1f}" r="{3 if name == "p50" else 2}">'
                    f"<title>job {points[i].job_id}, {escape(label)} {name}: {escape(_seconds(value))}</title></circle>"
                )
    for n, label in enumerate(labels):
        for i, p in enumerate(points):
            count_failed = p.failures.get(label)
            if not count_failed:
                continue
            px, py = xy(i, 0)
            py -= 5 + 9 * (n % 3)  # above the axis; configurations of one job side by side
            ran = count_failed + p.n.get(label, 0)
            parts.append(
                f'<g class="failure s{n % 6}"><title>job {p.job_id}, {escape(label)}: the test failed in '
                f"{count_failed} of {ran} run{'s' if ran != 1 else ''} (a failure's time is not its latency)</title>"
                f'<path d="M{px - 4:.1f},{py - 4:.1f}L{px + 4:.1f},{py + 4:.1f}M{px - 4:.1f},{py + 4:.1f}'
                f'L{px + 4:.1f},{py - 4:.1f}"/></g>'
            )
    column = {p.job_id: i for i, p in enumerate(points)}
    for job_id, label, tip, href in markers or []:
        if job_id not in column:
            continue  # older than the jobs drawn
        i = column[job_id]
        # Between the last fast job's column and the first slow one's; the label on the
        # side with room.
        px = (xy(i, 0)[0] + xy(i - 1, 0)[0]) / 2 if i > 0 else xy(i, 0)[0]
        tx, anchor = (px + 4, "start") if px < width / 2 else (px - 4, "end")
        parts.append(
            f'<a class="change-point" href="{escape(href)}"><title>{escape(tip)}</title>'
            f'<line x1="{px:.1f}" y1="{top}" x2="{px:.1f}" y2="{height - bottom}"/>'
            f'<text x="{tx:.1f}" y="{top + 10}" text-anchor="{anchor}">{escape(label)}</text></a>'
        )
    step = max(1, count // 8)  # at most ~8 job labels: they would overlap
    for i in range(0, count, step):
        px, _ = xy(i, 0)
        parts.append(
            f'<text class="tick" x="{px:.1f}" y="{height - 8}" text-anchor="middle">#{points[i].job_id}</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def bisect_plot(result: dict, title: str) -> Markup:
    """A bisect's measured commits by their place in the range (oldest left): each run as a
    dot, the median as a bar, the culprit's place as a line (services/jobs/bisect.py as_json)."""
    commits = result.get("commits") or []
    if not commits:
        return Markup('<p class="muted">No commit was measured.</p>')
    width, height, left, right, top, bottom = 720, 200, 64, 20, 12, 30
    count = max(int(result.get("range_commits") or 2), 2)
    high = max(d for c in commits for d in c["durations_s"]) * 1.1 or 1.0

    def xy(index: int, value: float) -> tuple[float, float]:
        return left + index / (count - 1) * (width - left - right), top + (1 - value / high) * (height - top - bottom)

    parts = _frame("bisect", title, width, height, left, right, high, xy)
    culprit = result.get("culprit_index")
    if culprit:
        # Between the culprit's parent and the culprit: where the time changed.
        px = (xy(culprit, 0)[0] + xy(culprit - 1, 0)[0]) / 2
        parts.append(
            f'<line class="culprit" x1="{px:.1f}" y1="{top}" x2="{px:.1f}" y2="{height - bottom}">'
            f"<title>culprit: commit {culprit + 1} of {count}</title></line>"
        )
    for c in commits:
        median = c["median_s"]
        mx, my = xy(c["index"], median)
        parts.append(
            f'<line class="median" x1="{mx - 8:.1f}" y1="{my:.1f}" x2="{mx + 8:.1f}" y2="{my:.1f}">'
            f"<title>commit {c['index'] + 1} {escape(c['sha'][:10])}: median {escape(_seconds(median))} "
            f"of {len(c['durations_s'])} runs</title></line>"
        )
        for value in c["durations_s"]:
            px, py = xy(c["index"], value)
            tip = escape(_seconds(value))
            parts.append(f'<circle class="dot" cx="{px:.1f}" cy="{py:.1f}" r="2.5"><title>{tip}</title></circle>')
        parts.append(f'<text class="tick" x="{mx:.1f}" y="{height - 8}" text-anchor="middle">{c["index"] + 1}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def _frame(
    kind: str,
    title: str,
    width: int,
    height: int,
    left: int,
    right: int,
    high: float,
    xy: Callable[[int, float], tuple[float, float]],
) -> list[str]:
    """A plot's opening tag and its seconds axis: three grid lines, 0, half and ``high``."""
    parts = [
        f'<svg class="plot {kind}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>',
    ]
    for tick in (0.0, high / 2, high):
        _, ty = xy(0, tick)
        parts.append(f'<line class="grid" x1="{left}" y1="{ty:.1f}" x2="{width - right}" y2="{ty:.1f}"/>')
        parts.append(
            f'<text class="tick" x="{left - 6}" y="{ty + 4:.1f}" text-anchor="end">'
            f"{escape(_seconds(tick) if tick else '0 s')}</text>"
        )
    return parts
