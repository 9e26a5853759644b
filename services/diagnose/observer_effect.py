"""observer_effect: a tracer changed the timing of the very behaviour under study.

strace costs ~90 us per syscall here, and it can shrink or flip a contrast (DESIGN.md
section 8: the hand-off pathology went from 90x to 18x under strace). The finding
says which evidence was taken under a distorted timing.
"""

from __future__ import annotations

from services.diagnose.context import RuleContext, subject
from services.diagnose.findings import FindingDraft, Severity
from services.models import RunKind


def check(context: RuleContext) -> list[FindingDraft]:
    limit = context.thresholds.observer_effect_ratio
    worst: dict[str | None, tuple] = {}
    for config in context.job.configs:
        for run in config.runs:
            if run.kind != RunKind.evidence or run.timed_out or not run.probe:
                continue
            median = context.timing_median(config.label, run.test_id)
            if not median:
                continue
            wall = _test_wall(run) if run.test_id else run.wall_s
            if wall is None:
                continue
            ratio = wall / median
            distortion = max(ratio, 1 / ratio) if ratio > 0 else float("inf")
            if abs(wall - median) < context.thresholds.observer_effect_min_s:
                continue
            if distortion >= limit and (run.test_id not in worst or distortion > worst[run.test_id][0]):
                worst[run.test_id] = (distortion, ratio, run, config.label, median, wall)
    drafts = []
    for test_id, (distortion, ratio, run, label, median, wall) in worst.items():
        direction = "slower" if ratio > 1 else "faster"
        evidence_ids = [e.id for e in context.job.evidence if e.run_id == run.id]
        drafts.append(
            FindingDraft(
                kind="observer_effect",
                severity=Severity.low,
                title=f"{subject(test_id)} ran {distortion:.1f}x {direction} under {run.probe} than untraced ({label})",
                detail=(
                    f"evidence run under {run.probe}: {wall:.3f} s; timing runs with {label}: median {median:.3f} s. "
                    f"Read that evidence as the behaviour under the tracer; the timing verdicts come from the "
                    f"untraced runs"
                ),
                config_label=label,
                test_id=test_id,
                metrics={"probe": run.probe, "ratio": ratio, "evidence_wall_s": wall, "timing_median_s": median},
                evidence_ids=evidence_ids,
            )
        )
    return drafts


def _test_wall(run) -> float | None:
    durations = [r.duration_s for r in run.test_results if r.test_id == run.test_id]
    return durations[0] if durations else None
