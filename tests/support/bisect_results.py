"""Bisect results as the search makes them and the bisect step stores them: the search
(services/jobs/bisect.py ``bisect``) run on a synthetic test whose median at each commit is
given, with a seeded lognormal noise of about 5 % (as tests/unit/services/jobs/test_bisect.py
draws it), and its result stored as services/jobs/bisect_step.py stores it. What reads a
stored result (a check run) is tested on these, so a change of the result's shape breaks it."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

from services.jobs.bisect import BisectResult, Budget, MeasureFailed, bisect
from services.jobs.bisect_step import _with_subjects
from services.measure.confirm import rule_of
from services.thresholds import Thresholds

COMMITS = [f"{i:02d}" + "ab" * 19 for i in range(16)]
CONFIG = "cpuset=0"
# What a pytest run costs beyond the test itself (start-up, collection).
OVERHEAD_S = 0.3


def searched(
    seconds: Callable[[int], float], *, budget: Budget = Budget(), seed: int = 1, fails_at: int | None = None
) -> BisectResult:
    """The search over COMMITS in CONFIG with the project's default rule, the test taking
    ``seconds(index)`` at each commit; a clock that advances by what each run took."""
    rng, now = random.Random(seed), [0.0]

    def measure(commit: str, n: int) -> list[float]:
        index = COMMITS.index(commit)
        if index == fails_at:
            raise MeasureFailed(commit, "the test failed")
        durations = [seconds(index) * rng.lognormvariate(0, 0.05) for _ in range(n)]
        now[0] += sum(durations) + n * OVERHEAD_S
        return durations

    return bisect(COMMITS, measure, rule_of(Thresholds()), budget, config=CONFIG, clock=lambda: now[0])


def stored(result: BisectResult, subject: str = "change 9") -> dict[str, Any]:
    """The result as the step stores it on the Bisect row (JSON, with the culprit's subject)."""
    return json.loads(json.dumps(_with_subjects(result, lambda sha: subject)))


def step_at(index: int, fast_s: float = 0.1, slow_s: float = 0.2) -> Callable[[int], float]:
    """A test ``slow_s`` from commit ``index`` (0-based) on, ``fast_s`` before."""
    return lambda at: slow_s if at >= index else fast_s
