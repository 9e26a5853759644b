"""A pull request against its base: per test, did the head make it slower?

The screen runs the base commit's checkout beside the head's, interleaved in the same
rounds on one node (services/measure/screen.py BaseSide). Here each test (and the whole
command) in each configuration is judged head against base: the ratio of medians with a
seeded bootstrap interval, and the rank test over both sides' runs, its p-values held
to the job's false discovery rate across every test judged (Benjamini-Hochberg, as for
cpu_sensitivity). A verdict needs ``min_repetitions`` runs a side; a change below the
``cpu_sensitivity_min_s`` floor is no change. A regressed test becomes a finding
(``slower_than_base``) so that it is triaged, and muted, like any other.
"""

from __future__ import annotations

import random
import shlex
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, object_session

from services.diagnose import triage
from services.diagnose.findings import fingerprint, format_seconds, graded
from services.diagnose.metrics import SlowerThanBaseMetrics
from services.measure.samples import JobSamples, collect, succeeded
from services.measure.stats import Summary, benjamini_hochberg, median_interval, rank_test, ratio_interval
from services.models import COMMAND_KINDS, BaseComparison, Finding, Job, JobKind, JobSource, RunKind
from services.thresholds import Thresholds

REGRESSED, IMPROVED, UNCHANGED, TOO_NOISY = "regressed", "improved", "unchanged", "too_noisy"
# A test the base commit does not have: nothing to compare, and no part of the whole
# command's comparison.
NEW = "new"
VERDICTS = (REGRESSED, IMPROVED, UNCHANGED, TOO_NOISY, NEW)
FINDING_KIND = "slower_than_base"
# The order the report, the check run and the page list them in.
VERDICT_ORDER = {REGRESSED: 0, TOO_NOISY: 1, NEW: 2, IMPROVED: 3, UNCHANGED: 4}
BASE_KINDS = (RunKind.base, RunKind.base_warmup, RunKind.base_focus)


@dataclass
class Change:
    config: str
    test_id: str | None
    base: Summary | None  # None: a test new on the head
    head: Summary
    ratio: float | None
    ratio_low: float | None
    ratio_high: float | None
    p_value: float | None
    verdict: str


def compare(
    base: JobSamples, head: JobSamples, thresholds: Thresholds, seed: int = 0, new: frozenset[str] = frozenset()
) -> list[Change]:
    """Every test (None: the command) and configuration measured on both sides; and each
    test in ``new`` (absent on the base: new_tests) as NEW, in each configuration it ran."""
    pairs: list[tuple[str | None, str, list[float], list[float]]] = []
    fresh: list[Change] = []
    for test_id, head_series, _ in head.series():
        base_series = base.wall if test_id is None else base.tests.get(test_id, {})
        for label, head_values in head_series.items():
            base_values = base_series.get(label)
            if head_values and test_id is not None and test_id in new:
                fresh.append(Change(label, test_id, None, median_interval(head_values), None, None, None, None, NEW))
            elif head_values and base_values:
                pairs.append((test_id, label, base_values, head_values))
    rng = random.Random(seed)
    p_values = {i: rank_test([b, h], rng) for i, (_, _, b, h) in enumerate(pairs)}
    moved = benjamini_hochberg({str(i): p for i, p in p_values.items()}, thresholds.cpu_sensitivity_fdr)
    changes = []
    for i, (test_id, label, base_values, head_values) in enumerate(pairs):
        b, h = median_interval(base_values), median_interval(head_values)
        interval = ratio_interval(base_values, head_values, seed=seed + i)
        ratio, low, high = interval if interval is not None else (None, None, None)
        changes.append(
            Change(
                label,
                test_id,
                b,
                h,
                ratio,
                low,
                high,
                p_values[i],
                verdict(b, h, ratio, low, high, str(i) in moved, thresholds),
            )
        )
    return changes + fresh


def new_tests(job: Job) -> frozenset[str]:
    """The head's tests that the base commit does not have: none of its runs reported them,
    in any outcome (a test that failed on the base is not new)."""
    on_base = {
        result.test_id
        for config in job.configs
        for run in config.runs
        if run.kind in BASE_KINDS
        for result in run.test_results
    }
    if not on_base:
        return frozenset()  # the base ran no test at all: nothing tells new from failing
    return frozenset(test for test in collect(job).tests if test not in on_base)


def head_samples(job: Job, new: frozenset[str]) -> JobSamples:
    """The head's samples as the comparison reads them. The whole command is compared
    without the tests new on the head: each head run's wall time less those tests'
    durations in it (start-up and every test the base also has stay in, so the two sides
    time the same work; comparing only the common tests' sum would drop start-up, where a
    pull request's new import shows)."""
    samples = collect(job)
    if not new:
        return samples
    for config in job.configs:
        runs = [run for run in config.runs if run.kind in COMMAND_KINDS and succeeded(run) and not run.traced]
        samples.wall[config.label] = [
            run.wall_s - sum(r.duration_s for r in run.test_results if r.test_id in new and r.outcome == "passed")
            for run in runs
        ]
    return samples


def verdict(
    base: Summary,
    head: Summary,
    ratio: float | None,
    low: float | None,
    high: float | None,
    significant: bool,
    thresholds: Thresholds,
) -> str:
    if abs(head.median - base.median) < thresholds.cpu_sensitivity_min_s:
        return UNCHANGED  # below the floor: a scheduler tick, not a change worth a verdict
    if min(base.n, head.n) < thresholds.min_repetitions or ratio is None or low is None or high is None:
        return TOO_NOISY
    change = thresholds.base_change_ratio
    if significant and low > 1 and ratio >= change:
        return REGRESSED
    if significant and high < 1 and ratio <= 1 / change:
        return IMPROVED
    if low >= 1 / change and high <= change:
        return UNCHANGED
    return TOO_NOISY


def changes_of(job: Job, thresholds: Thresholds) -> list[Change]:
    """The job's comparison with its base commit as its runs stand now."""
    new = new_tests(job)
    return compare(collect(job, RunKind.base), head_samples(job, new), thresholds, job.screen_seed or 0, new)


def needs_runs(job: Job, thresholds: Thresholds) -> list[str]:
    """The configurations whose comparison more runs could still decide (the screen's stopping rule)."""
    return list(dict.fromkeys(c.config for c in changes_of(job, thresholds) if c.verdict == TOO_NOISY))


def record(session: Session, job: Job, thresholds: Thresholds) -> list[BaseComparison]:
    """Store the comparison of a pull request's job and its slower_than_base findings (idempotent).

    Called after the rules stored the job's other findings; a job without a base does nothing.
    """
    source = session.get(JobSource, job.id)
    # A gate's pull request is compared with the base branch's history (services/jobs/gate.py).
    if source is None or not source.base_commit_sha or job.kind is JobKind.gate:
        return []
    session.execute(delete(BaseComparison).where(BaseComparison.job_id == job.id))
    base = collect(job, RunKind.base)
    if not any(base.wall.values()) and not base.tests:
        failed = sum(base.failed.values())
        job.notes = [
            *job.notes,
            f"no comparison with the base commit {source.base_commit_sha[:12]}: "
            + (f"its {failed} runs failed" if failed else "it was not screened"),
        ]
        return []
    new = new_tests(job)
    changes = compare(base, head_samples(job, new), thresholds, job.screen_seed or 0, new)
    if new:
        note = (
            f"{len(new)} tests are new on the head (the base commit does not have them): marked new, and left out of "
            "the whole command's comparison (each head run's wall time less their durations)"
        )
        if note not in job.notes:
            job.notes = [*job.notes, note]
    rows = [
        BaseComparison(
            job_id=job.id,
            config_label=c.config,
            test_id=c.test_id,
            # A new test has no base: 0 runs there (the view shows no median).
            base_median_s=c.base.median if c.base else 0.0,
            head_median_s=c.head.median,
            base_n=c.base.n if c.base else 0,
            head_n=c.head.n,
            ratio=c.ratio,
            ratio_low=c.ratio_low,
            ratio_high=c.ratio_high,
            p_value=c.p_value,
            verdict=c.verdict,
        )
        for c in changes
    ]
    session.add_all(rows)
    _findings(session, job, source, changes, thresholds)
    session.flush()
    return rows


def _findings(session: Session, job: Job, source: JobSource, changes: list[Change], thresholds: Thresholds) -> None:
    worst: dict[str | None, Change] = {}
    for change in changes:
        if change.verdict != REGRESSED or change.ratio is None or change.base is None:
            continue
        known = worst.get(change.test_id)
        if known is None or (known.ratio or 0) < change.ratio:
            worst[change.test_id] = change
    if any(test_id is not None for test_id in worst):
        # The command is slower because a test is: one problem, triaged once, on the test.
        worst.pop(None, None)
    base_commit = (source.base_commit_sha or "")[:12]
    for test_id, change in worst.items():
        ratio, base = change.ratio or 0.0, change.base
        if base is None:
            continue  # never: only a compared change regresses
        severity = graded(ratio, thresholds.regression_medium_ratio, thresholds.regression_high_ratio)
        what = test_id or "the command"
        scope = test_id or "command:" + shlex.join(job.command)
        finding = Finding(
            job=job,
            kind=FINDING_KIND,
            severity=severity,
            title=f"{what} is {ratio:.1f}x slower than on the base commit {base_commit}",
            detail=(
                f"median {format_seconds(change.head.median)} against {format_seconds(base.median)} on "
                f"{base_commit} with {change.config} (ratio {ratio:.2f}, 95 % interval {change.ratio_low:.2f} to "
                f"{change.ratio_high:.2f}; {change.head.n} head and {base.n} base runs, interleaved; "
                f"rank test p={change.p_value:.2g})"
            ),
            config_label=change.config,
            test_id=test_id,
            # Stored here, its one edge: the finding is built whole, as no rule's draft.
            metrics=SlowerThanBaseMetrics(
                ratio=ratio,
                ratio_low=change.ratio_low,
                ratio_high=change.ratio_high,
                base_median_s=base.median,
                head_median_s=change.head.median,
                p_value=change.p_value,
                base_commit=source.base_commit_sha,
            ).stored(),
            evidence_ids=[],
            fingerprint=fingerprint(job.project.name, FINDING_KIND, scope),
        )
        triage.carry(session, finding)
        session.add(finding)


def comparison_view(job: Job) -> dict[str, Any] | None:
    """The stored comparison as the report carries it (None: not a pull request's job, or a
    gate's, compared with history: the report's gate)."""
    session = object_session(job)
    source = session.get(JobSource, job.id) if session is not None else None
    if session is None or source is None or not source.base_commit_sha or job.kind is JobKind.gate:
        return None
    rows = list(session.scalars(select(BaseComparison).where(BaseComparison.job_id == job.id)))
    rows.sort(key=lambda r: (VERDICT_ORDER.get(r.verdict, 9), r.test_id is not None, r.test_id or "", r.config_label))
    return {
        "base_commit": source.base_commit_sha,
        "base_ref": source.base_ref,
        "head_commit": source.commit_sha or source.github_head_sha,
        "tests": [
            {
                "test": r.test_id,
                "config": r.config_label,
                "base_median_s": None if r.verdict == NEW else r.base_median_s,
                "head_median_s": r.head_median_s,
                "base_n": r.base_n,
                "head_n": r.head_n,
                "ratio": r.ratio,
                "ratio_low": r.ratio_low,
                "ratio_high": r.ratio_high,
                "p_value": r.p_value,
                "verdict": r.verdict,
            }
            for r in rows
        ],
        "counts": {v: sum(r.verdict == v for r in rows) for v in VERDICTS},
    }
