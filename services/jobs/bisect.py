"""Bisect a regression to its commit: which commit of a range made one test slower.

The search follows Chromium's Pinpoint (the catapult repository,
dashboard/dashboard/pinpoint/models/job_state.py, ``JobState.Explore`` and
``JobState.Differences``): measure both ends of the range; compare each pair of
adjacent measured commits; where a pair is DIFFERENT and the commits are not
neighbours, measure the commit half-way between them and compare again on both sides;
where a pair is UNDECIDED, take more runs; where it is SAME, leave it. The search ends
when no pair has work left. The culprit is the later commit of a DIFFERENT pair of
neighbours: the first commit whose runs differ from its parent's. Pinpoint also
speculates, measuring the midpoints of the midpoints at once, which pays on a pool of
bots; runs here are serial, one at a time on the machine, so one midpoint a round.

What is new here is only the comparison. Each pair is judged by the project's sequential
rule (services/measure/sequential.py ``compare_arms``, the confirm step's rule): the exact
rank test of the two commits' runs, its level spent across the looks, so that taking
more runs of an UNDECIDED pair until it decides keeps the pair at the rule's level.
``compare_arms`` takes arms of equal length: a pair is judged on the first ``k`` runs of
each commit, ``k`` the shorter's, so a commit measured further for its other neighbour
does not change a verdict already reached.

A pair needs no runs before the first look that can decide (two arms of ``j`` runs reach
at best p = 1 / C(2j, j)), so a commit is measured straight to that many runs; after that
one more run per UNDECIDED look, up to ``rule.looks``. The runs of the commits a round
measures alternate, one run each in turn, so a drift of the machine falls on them alike.

The search measures one test in one CPU configuration, the caller's: a test that became
CPU-sensitive is bisected in the configuration where the change shows (``config`` is
carried into the result). It stops when its budget (runs, seconds) is spent: the verdict
is then "undecided", with the runs it took.
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.measure.sequential import DIFFERENT, SAME, UNDECIDED, Judgement, SequentialRule, compare_arms

CULPRIT, NO_CULPRIT, UNDECIDED_VERDICT = "culprit", "no_culprit", "undecided"

# measure(commit, n): n more durations in seconds of the one test at that commit.
Measure = Callable[[str, int], list[float]]


class MeasureFailed(Exception):
    """The test could not be measured at a commit (it failed, or did not run there)."""

    def __init__(self, commit: str, reason: str):
        super().__init__(f"{commit}: {reason}")
        self.commit = commit
        self.reason = reason


@dataclass(frozen=True)
class Budget:
    """How much the search may spend; None: no bound of that kind."""

    max_runs: int | None = None
    max_s: float | None = None  # wall time spent measuring


@dataclass(frozen=True)
class PairJudged:
    """Two measured commits, the earlier ``good`` (its index in the range) and the later
    ``bad``, judged on ``runs`` runs each: later over earlier."""

    good: int
    bad: int
    runs: int
    judgement: Judgement

    @property
    def direction(self) -> str | None:
        if self.judgement.verdict != DIFFERENT:
            return None
        return "slower" if self.judgement.slower else "faster"


@dataclass
class BisectResult:
    verdict: str  # CULPRIT, NO_CULPRIT or UNDECIDED_VERDICT
    reason: str
    commits: list[str]  # the range, oldest (good) first
    config: str | None
    culprit: int | None = None  # the culprit's index in ``commits``
    direction: str | None = None  # "slower" or "faster": what the culprit did to the test
    ratio: float | None = None  # culprit over its parent: the Hodges-Lehmann ratio
    ratio_low: float | None = None
    ratio_high: float | None = None
    also: list[int] = field(default_factory=list)  # other neighbours that differ the same way
    runs: list[tuple[str, float]] = field(default_factory=list)  # every run, in the order taken
    pairs: list[PairJudged] = field(default_factory=list)  # each pair's final judgement
    wall_s: float = 0.0  # the wall time spent measuring
    timed: str = "the test"  # what each run's seconds are: a test's, or "the command" timed whole

    def durations(self, commit: str) -> list[float]:
        return [seconds for sha, seconds in self.runs if sha == commit]

    @property
    def test_s(self) -> float | None:
        """The test's own time: its median at the good end."""
        good = self.durations(self.commits[0])
        return statistics.median(good) if good else None

    @property
    def culprit_sha(self) -> str | None:
        return self.commits[self.culprit] if self.culprit is not None else None

    def cost(self) -> str:
        """What the search cost, against the test's own time: "34 runs, 12.1 s, 40x the test's time"."""
        line = f"{len(self.runs)} runs, {_s(self.wall_s)}"
        test_s = self.test_s
        if test_s:
            line += f", {self.wall_s / test_s:.0f}x {self.timed}'s time"
        return line

    def as_json(self) -> dict[str, Any]:
        measured = [sha for sha in self.commits if self.durations(sha)]
        return {
            "verdict": self.verdict,
            "timed": self.timed,
            "reason": self.reason,
            "config": self.config,
            "good": self.commits[0],
            "bad": self.commits[-1],
            "range_commits": len(self.commits),
            "culprit": self.culprit_sha,
            "culprit_index": self.culprit,
            "culprit_parent": self.commits[self.culprit - 1] if self.culprit else None,
            "direction": self.direction,
            "ratio": self.ratio,
            "ratio_low": self.ratio_low,
            "ratio_high": self.ratio_high,
            "also": [self.commits[i] for i in self.also],
            "commits": [
                {
                    "sha": sha,
                    "index": self.commits.index(sha),
                    "durations_s": self.durations(sha),
                    "median_s": statistics.median(self.durations(sha)),
                }
                for sha in measured
            ],
            "runs": [{"commit": sha, "duration_s": seconds} for sha, seconds in self.runs],
            "pairs": [
                {
                    "good": self.commits[pair.good],
                    "bad": self.commits[pair.bad],
                    "runs": pair.runs,
                    "verdict": pair.judgement.verdict,
                    "direction": pair.direction,
                    "ratio": pair.judgement.ratio,
                    "ratio_low": pair.judgement.ratio_low,
                    "ratio_high": pair.judgement.ratio_high,
                    "p_slower": pair.judgement.p_slower,
                    "p_faster": pair.judgement.p_faster,
                }
                for pair in self.pairs
            ],
            "cost": {
                "runs": len(self.runs),
                "wall_s": round(self.wall_s, 3),
                "test_s": self.test_s,
                "says": self.cost(),
            },
        }


def first_deciding_look(rule: SequentialRule) -> int:
    """The fewest runs per commit at which ``compare_arms`` can decide DIFFERENT: runs
    before it would be judged for nothing (5 at the 1 % level)."""
    return next(
        (j for j in range(1, rule.looks + 1) if 1 / math.comb(2 * j, j) <= rule.alpha / 2),
        rule.looks,
    )


def bisect(
    commits: Sequence[str],
    measure: Measure,
    rule: SequentialRule,
    budget: Budget = Budget(),
    *,
    config: str | None = None,
    timed: str = "the test",
    seed: int = 0,
    progress: Callable[[str], None] = lambda message: None,
    clock: Callable[[], float] = time.monotonic,
) -> BisectResult:
    """Search ``commits`` (oldest, the good end, first; newest, the bad end, last) for the
    commit that changed the test's time; ``measure`` takes its runs, ``clock`` times them."""
    if len(commits) < 2:
        raise ValueError("a range needs a good and a bad commit")
    search = _Search(list(commits), measure, rule, budget, seed, progress, clock)
    result = BisectResult(UNDECIDED_VERDICT, "", list(commits), config, timed=timed)
    search.run()
    result.runs, result.wall_s = search.runs, search.wall_s
    result.pairs = [search.judged[key] for key in sorted(search.judged)]
    _conclude(result, search)
    return result


class _Search:
    """The search's state: the runs of each measured commit and each pair's judgement."""

    def __init__(
        self,
        commits: list[str],
        measure: Measure,
        rule: SequentialRule,
        budget: Budget,
        seed: int,
        progress: Callable[[str], None],
        clock: Callable[[], float],
    ):
        self.commits, self.measure, self.rule, self.budget = commits, measure, rule, budget
        self.seed, self.progress, self.clock = seed, progress, clock
        self.first = first_deciding_look(rule)
        self.durations: dict[int, list[float]] = {0: [], len(commits) - 1: []}
        self.runs: list[tuple[str, float]] = []
        self.wall_s = 0.0
        # A pair's verdict, once DIFFERENT or SAME, is final: the sequential rule stops at
        # the first look that decides, and its level holds only if it does.
        self.judged: dict[tuple[int, int], PairJudged] = {}
        self.stopped: str | None = None  # why the search stopped short

    def run(self) -> None:
        while self.stopped is None:
            wanted = self._plan()
            if not wanted:
                return
            self._take(wanted)

    def _plan(self) -> dict[int, int]:
        """Judge every pair of neighbouring measured commits that can be judged; the runs
        each commit needs next (index -> runs it should have), or {} when none does."""
        wanted: dict[int, int] = {}

        def want(index: int, runs: int) -> None:
            wanted[index] = max(wanted.get(index, 0), runs)

        measured = sorted(self.durations)
        for good, bad in itertools.pairwise(measured):
            runs = min(len(self.durations[good]), len(self.durations[bad]))
            if runs < self.first:
                want(good, self.first)
                want(bad, self.first)
                continue
            pair = self.judged.get((good, bad))
            if pair is None or (pair.judgement.verdict == UNDECIDED and pair.runs < runs):
                pair = self._judge(good, bad, runs)
            verdict = pair.judgement.verdict
            if verdict == DIFFERENT and bad - good > 1:
                # Pinpoint's step: the commit half-way, compared with both ends next round.
                self.durations.setdefault((good + bad) // 2, [])
                want((good + bad) // 2, self.first)
            elif verdict == UNDECIDED and runs < self.rule.looks:
                want(good, runs + 1)
                want(bad, runs + 1)
        return {index: runs for index, runs in wanted.items() if len(self.durations[index]) < runs}

    def _judge(self, good: int, bad: int, runs: int) -> PairJudged:
        # Later over earlier, on the first ``runs`` of each: equal arms, as compare_arms takes.
        later, earlier = self.durations[bad][:runs], self.durations[good][:runs]
        pair = PairJudged(good, bad, runs, compare_arms(later, earlier, self.rule, seed=self.seed))
        self.judged[(good, bad)] = pair
        j = pair.judgement
        said = f"{pair.direction} {j.ratio:.2f}x" if pair.direction else f"{j.verdict} ({j.ratio:.2f}x)"
        interval = f" [{j.ratio_low:.2f} .. {j.ratio_high:.2f}]" if j.ratio_low and j.ratio_high else ""
        self.progress(
            f"{_short(self.commits[good])}..{_short(self.commits[bad])} "
            f"(commits {good + 1}-{bad + 1} of {len(self.commits)}): {said}{interval}, {runs} runs each"
        )
        return pair

    def _take(self, wanted: dict[int, int]) -> None:
        """Measure each wanted commit up to its runs, one run of each in turn."""
        measured_now = set()
        while self.stopped is None:
            short = [index for index in sorted(wanted) if len(self.durations[index]) < wanted[index]]
            if not short:
                break
            for index in short:
                if not self._affordable():
                    break
                self._measure_one(index)
                measured_now.add(index)
                if self.stopped is not None:
                    break
        for index in sorted(measured_now):
            seconds = self.durations[index]
            if seconds:
                self.progress(
                    f"commit {index + 1}/{len(self.commits)} {_short(self.commits[index])}: "
                    f"{len(seconds)} runs, median {_s(statistics.median(seconds))}"
                )

    def _affordable(self) -> bool:
        """Whether one more run fits the budget; it does not, the search stops, saying why."""
        if self.budget.max_runs is not None and len(self.runs) + 1 > self.budget.max_runs:
            self.stopped = f"the budget of {self.budget.max_runs} runs ran out"
        # The next run is estimated at the mean so far: stop before a run that would overrun.
        elif self.budget.max_s is not None and self.runs and self.wall_s * (1 + 1 / len(self.runs)) > self.budget.max_s:
            self.stopped = f"the budget of {_s(self.budget.max_s)} ran out ({_s(self.wall_s)} spent)"
        return self.stopped is None

    def _measure_one(self, index: int) -> None:
        commit = self.commits[index]
        started = self.clock()
        try:
            taken = self.measure(commit, 1)
        except MeasureFailed as exc:
            self.stopped = f"the test could not be measured at {_short(commit)}: {exc.reason}"
            return
        finally:
            self.wall_s += self.clock() - started
        if not taken:
            self.stopped = f"no run came back from {_short(commit)}"
            return
        self.durations[index].extend(taken)
        self.runs.extend((commit, seconds) for seconds in taken)


def _conclude(result: BisectResult, search: _Search) -> None:
    """The verdict from the pairs judged: where the ends stand, and which neighbours differ."""
    last = len(result.commits) - 1
    ends = search.judged.get((0, last))
    if ends is None:
        result.reason = search.stopped or "the ends were never judged"
        return
    if ends.judgement.verdict == SAME:
        result.verdict = NO_CULPRIT
        result.reason = (
            f"the good and the bad end are the same: {ends.judgement.ratio:.2f}x, "
            f"within {search.rule.change_ratio:g}x either way, on {ends.runs} runs each"
        )
        return
    if ends.judgement.verdict == UNDECIDED:
        result.reason = search.stopped or (
            f"the good and the bad end are not decided in {ends.runs} runs each "
            f"({ends.judgement.ratio:.2f}x): a change this small needs a looser rule or more looks"
        )
        return
    result.direction = ends.direction
    # Neighbours that differ the way the ends do; the first of them is the culprit.
    culprits = [pair for pair in result.pairs if pair.bad - pair.good == 1 and pair.direction == ends.direction]
    if culprits:
        first = culprits[0]
        result.verdict = CULPRIT
        result.culprit = first.bad
        result.ratio = first.judgement.ratio
        result.ratio_low, result.ratio_high = first.judgement.ratio_low, first.judgement.ratio_high
        result.also = [pair.bad for pair in culprits[1:]]
        result.reason = (
            f"{_short(result.commits[first.bad])} made the test {ends.direction} than its parent "
            f"{_short(result.commits[first.good])}"
        )
        if search.stopped:
            result.reason += f"; the search stopped before it ended: {search.stopped}"
        return
    result.reason = search.stopped or (
        f"the ends differ ({ends.direction}, {ends.judgement.ratio:.2f}x) but no one commit does: "
        "the change is spread over several commits, each below the change ratio, or undecided"
    )


def _short(sha: str) -> str:
    return sha[:10]


def _s(seconds: float) -> str:
    return f"{seconds:.3f} s" if seconds < 10 else f"{seconds:.1f} s"
