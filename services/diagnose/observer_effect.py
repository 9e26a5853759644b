"""observer_effect: a tracer changed the timing of the very behaviour under study.

strace costs ~90 us per syscall here, and it can shrink or flip a contrast (docs/explanations/design.md,
facts checked: the hand-off pathology went from 90x to 18x under strace). This is a note on
the evidence taken under a distorted timing (read it as the behaviour under the
tracer), not a finding: it says how to read the evidence, not what is wrong with the
program, and it must not outrank real problems in the inbox.
"""

from __future__ import annotations

from typing import Any

from services.diagnose.context import RuleContext, subject
from services.models import RunKind


def notes(context: RuleContext) -> dict[int, dict[str, Any]]:
    """evidence id -> the note on its run's timing, for evidence taken under a distorted timing."""
    limits = context.thresholds
    by_run: dict[int, dict[str, Any]] = {}
    for config in context.job.configs:
        for run in config.runs:
            if run.kind != RunKind.evidence or run.timed_out or not run.probe:
                continue
            median = context.timing_median(config.label, run.test_id)
            if not median:
                continue
            wall = _test_wall(run) if run.test_id else run.wall_s
            if wall is None or abs(wall - median) < limits.observer_effect_min_s:
                continue
            ratio = wall / median
            distortion = max(ratio, 1 / ratio) if ratio > 0 else float("inf")
            if distortion < limits.observer_effect_ratio:
                continue
            direction = "slower" if ratio > 1 else "faster"
            by_run[run.id] = {
                "kind": "observer_effect",
                "probe": run.probe,
                "config": config.label,
                "test": run.test_id,
                "ratio": ratio,
                "evidence_wall_s": wall,
                "timing_median_s": median,
                "text": (
                    f"{subject(run.test_id)} ran {distortion:.1f}x {direction} under {run.probe} "
                    f"({wall:.3f} s) than in the timing runs with {config.label} (median {median:.3f} s): "
                    f"read this evidence as the behaviour under the tracer; the timing verdicts come from "
                    f"the untraced runs"
                ),
            }
    return {e.id: by_run[e.run_id] for e in context.job.evidence if e.run_id in by_run}


def _test_wall(run) -> float | None:
    durations = [r.duration_s for r in run.test_results if r.test_id == run.test_id]
    return durations[0] if durations else None
