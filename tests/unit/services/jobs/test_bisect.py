"""The bisect search (services/jobs/bisect.py) on synthetic tests: durations drawn with
a seeded lognormal noise of about 5 %, a clock that advances by what each run took, and
a log of every run the search asked for."""

from __future__ import annotations

import json
import random
from collections.abc import Callable

from services.jobs.bisect import (
    CULPRIT,
    NO_CULPRIT,
    UNDECIDED_VERDICT,
    Budget,
    MeasureFailed,
    bisect,
    first_deciding_look,
)
from services.measure.sequential import SequentialRule

COMMITS = [f"{i:02d}" + "ab" * 19 for i in range(16)]
RULE = SequentialRule(looks=8, change_ratio=1.2)
# What a pytest run costs beyond the test itself (start-up, collection).
OVERHEAD_S = 0.3


class Synthetic:
    """A test whose median at each commit is ``seconds(index)``."""

    def __init__(self, seconds: Callable[[int], float], seed: int = 1, fails_at: int | None = None):
        self.seconds, self.rng, self.fails_at = seconds, random.Random(seed), fails_at
        self.now = 0.0
        self.taken: list[tuple[str, float]] = []

    def measure(self, commit: str, n: int) -> list[float]:
        index = COMMITS.index(commit)
        if index == self.fails_at:
            raise MeasureFailed(commit, "the test failed")
        durations = [self.seconds(index) * self.rng.lognormvariate(0, 0.05) for _ in range(n)]
        self.taken.extend((commit, seconds) for seconds in durations)
        self.now += sum(durations) + n * OVERHEAD_S
        return durations

    def clock(self) -> float:
        return self.now


def test_a_2x_step_at_commit_9_of_16_is_named_in_far_fewer_runs_than_measuring_every_commit():
    step = Synthetic(lambda index: 0.2 if index >= 9 else 0.1)
    said: list[str] = []
    result = bisect(COMMITS, step.measure, RULE, config="cpuset=0", progress=said.append, clock=step.clock)
    assert result.verdict == CULPRIT, result.reason
    assert result.culprit_sha == COMMITS[9] and result.culprit == 9 and result.direction == "slower"
    assert result.ratio is not None and result.ratio_low is not None and result.ratio_high is not None
    assert 1.2 < result.ratio_low < result.ratio < result.ratio_high and 1.8 < result.ratio < 2.2, result
    # Ends, then 7, 11, 9 and 8: six commits at the first look that can decide (5 runs).
    measured = sorted({sha for sha, _ in result.runs})
    assert measured == sorted(COMMITS[i] for i in (0, 7, 8, 9, 11, 15))
    # Measuring every commit to the same five runs would take 80, to the rule's looks 128.
    assert len(result.runs) == 30 == 6 * first_deciding_look(RULE) < len(COMMITS) * first_deciding_look(RULE) / 2
    # Every run the search took is recorded, in the order taken.
    assert result.runs == step.taken
    assert result.config == "cpuset=0" and result.also == []
    # Its cost: the runs, the wall time they took, and that against the test's own time.
    assert result.wall_s == step.now
    assert result.cost() == f"30 runs, {result.wall_s:.1f} s, {result.wall_s / result.test_s:.0f}x the test's time"
    assert any(line.startswith(f"{COMMITS[8][:10]}..{COMMITS[9][:10]}") and "slower" in line for line in said)

    report = json.loads(json.dumps(result.as_json()))
    assert report["verdict"] == "culprit" and report["culprit"] == COMMITS[9]
    assert report["culprit_parent"] == COMMITS[8] and report["config"] == "cpuset=0"
    assert [(run["commit"], run["duration_s"]) for run in report["runs"]] == step.taken
    assert sum(len(commit["durations_s"]) for commit in report["commits"]) == 30
    assert {(pair["good"], pair["bad"], pair["verdict"]) for pair in report["pairs"]} >= {
        (COMMITS[0], COMMITS[15], "different"),
        (COMMITS[8], COMMITS[9], "different"),
        (COMMITS[7], COMMITS[8], "same"),
    }
    assert report["cost"]["runs"] == 30 and report["cost"]["says"] == result.cost()


def test_a_speed_up_is_named_too_and_says_faster():
    faster = Synthetic(lambda index: 0.1 if index >= 4 else 0.3, seed=2)
    result = bisect(COMMITS, faster.measure, RULE, clock=faster.clock)
    assert result.verdict == CULPRIT and result.culprit == 4 and result.direction == "faster", result.reason
    assert result.ratio is not None and result.ratio < 1 / 1.2


def test_a_flat_range_ends_no_culprit_after_its_ends():
    flat = Synthetic(lambda index: 0.1, seed=3)
    result = bisect(COMMITS, flat.measure, RULE, clock=flat.clock)
    assert result.verdict == NO_CULPRIT and result.culprit is None, result.reason
    assert {sha for sha, _ in result.runs} == {COMMITS[0], COMMITS[-1]}
    assert len(result.runs) == 10 and result.runs == flat.taken
    assert result.as_json()["culprit"] is None


def test_a_budget_that_runs_out_ends_undecided_with_the_runs_it_took():
    step = Synthetic(lambda index: 0.2 if index >= 9 else 0.1, seed=4)
    result = bisect(COMMITS, step.measure, RULE, Budget(max_runs=17), clock=step.clock)
    assert result.verdict == UNDECIDED_VERDICT and "17 runs ran out" in result.reason, result.reason
    assert len(result.runs) == 17 and result.runs == step.taken
    # In seconds: each run here costs about 0.4-0.5 s of the clock.
    step = Synthetic(lambda index: 0.2 if index >= 9 else 0.1, seed=4)
    result = bisect(COMMITS, step.measure, RULE, Budget(max_s=6.0), clock=step.clock)
    assert result.verdict == UNDECIDED_VERDICT and "ran out" in result.reason, result.reason
    assert result.wall_s <= 6.0 and len(result.runs) == len(step.taken) < 30


def test_a_commit_where_the_test_cannot_run_ends_undecided_saying_where():
    broken = Synthetic(lambda index: 0.2 if index >= 9 else 0.1, fails_at=7)
    result = bisect(COMMITS, broken.measure, RULE, clock=broken.clock)
    assert result.verdict == UNDECIDED_VERDICT and COMMITS[7][:10] in result.reason, result.reason
    assert result.runs == broken.taken and len(result.runs) == 10


def test_a_change_spread_over_commits_names_no_single_culprit():
    # 1.1x a commit from 4 to 12: 2.1x end to end, no one commit past the change ratio.
    ramp = Synthetic(lambda index: 0.1 * 1.1 ** min(max(index - 4, 0), 8), seed=5)
    result = bisect(COMMITS, ramp.measure, RULE, clock=ramp.clock)
    assert result.verdict == UNDECIDED_VERDICT and result.culprit is None, result.reason
    assert "spread over several commits" in result.reason and result.direction == "slower"
    assert result.runs == ramp.taken


def test_a_test_that_became_cpu_sensitive_is_bisected_in_the_configuration_where_it_shows():
    """From commit 6 the test waits on a hand-off that costs 2x on two cores and nothing on
    one: the same search, in each configuration, names it only where it shows."""

    def seconds_in(config: str) -> Callable[[int], float]:
        return lambda index: 0.2 if index >= 6 and config == "cpuset=0-1" else 0.1

    pinned = Synthetic(seconds_in("cpuset=0"), seed=6)
    assert bisect(COMMITS, pinned.measure, RULE, config="cpuset=0", clock=pinned.clock).verdict == NO_CULPRIT
    both = Synthetic(seconds_in("cpuset=0-1"), seed=6)
    result = bisect(COMMITS, both.measure, RULE, config="cpuset=0-1", clock=both.clock)
    assert result.verdict == CULPRIT and result.culprit == 6 and result.as_json()["config"] == "cpuset=0-1"
