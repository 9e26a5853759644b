"""What a benchmark returns: figures, each a ratio or a distribution measured in the same
run, with its interval and target. Shared helpers turn raw samples into figures."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95


@dataclass
class Figure:
    name: str
    value: float | None
    unit: str  # "x" (a ratio), "s", "ms", "/s", "%", "runs"
    low: float | None = None  # the interval (CONFIDENCE), when the samples allow one
    high: float | None = None
    target: str | None = None  # as printed, e.g. "0.95-1.05", "< 1 s"
    met: bool | None = None  # None: no target, or nothing to judge it on
    n: int | None = None  # samples behind it
    note: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default), q in [0, 100]."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    position = (len(ordered) - 1) * q / 100
    below, above = math.floor(position), math.ceil(position)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def bootstrap(
    statistic: Callable[..., float], *samples: Sequence[float], seed: int = 16
) -> tuple[float, float] | tuple[None, None]:
    """Percentile bootstrap interval of ``statistic(*samples)``, each sample resampled on its own."""
    if any(len(s) < 3 for s in samples):
        return None, None
    rng = random.Random(seed)
    estimates = sorted(statistic(*(rng.choices(s, k=len(s)) for s in samples)) for _ in range(BOOTSTRAP_RESAMPLES))
    tail = (1 - CONFIDENCE) / 2
    return percentile(estimates, 100 * tail), percentile(estimates, 100 * (1 - tail))


def median_ratio(numerator: Sequence[float], denominator: Sequence[float]) -> float:
    return statistics.median(numerator) / statistics.median(denominator)


def ratio_figure(
    name: str,
    numerator: Sequence[float],
    denominator: Sequence[float],
    *,
    within: float | None = None,
    at_most: float | None = None,
    note: str = "",
) -> Figure:
    """Ratio of medians with a bootstrap interval. ``within=0.05``: target 0.95-1.05;
    ``at_most=X``: target <= X. Met is judged on the point estimate; the interval says how
    sure it is."""
    value = median_ratio(numerator, denominator)
    low, high = bootstrap(median_ratio, numerator, denominator)
    target, met = None, None
    if within is not None:
        target, met = f"{1 - within:.2f}-{1 + within:.2f}", abs(value - 1) <= within
    elif at_most is not None:
        target, met = f"<= {at_most:g}x", value <= at_most
    return Figure(name, value, "x", low, high, target, met, n=min(len(numerator), len(denominator)), note=note)


def spread_figure(name: str, samples: Sequence[float], note: str = "") -> Figure:
    """The relative spread of a workload: interquartile range over median, in %."""
    iqr = percentile(samples, 75) - percentile(samples, 25)
    return Figure(name, 100 * iqr / statistics.median(samples), "%", n=len(samples), note=note)


def quantile_figure(
    name: str,
    samples: Sequence[float],
    q: float,
    *,
    unit: str = "s",
    below: float | None = None,
    note: str = "",
) -> Figure:
    """A percentile of a distribution with its bootstrap interval; ``below``: target < below."""
    scale = 1000.0 if unit == "ms" else 1.0
    scaled = [v * scale for v in samples]
    value = percentile(scaled, q)
    low, high = bootstrap(lambda s: percentile(s, q), scaled)
    target, met = None, None
    if below is not None:
        target, met = f"< {below:g} {unit}", value < below
    return Figure(name, value, unit, low, high, target, met, n=len(samples), note=note)


def rate_figure(name: str, count: int, seconds: float, unit: str = "/s", note: str = "") -> Figure:
    return Figure(name, count / seconds, unit, n=count, note=note)
