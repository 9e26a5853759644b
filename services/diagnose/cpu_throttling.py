"""cpu_throttling: the cgroup quota throttled the run in many of its periods.

The usual cause is parallelism sized to the visible cores (os.cpu_count()) rather than
to the quota: eight workers under a two-CPU quota burn the period's budget in a
fraction of it and then all stand still until the next period.
"""

from __future__ import annotations

import statistics

from services.diagnose.context import RuleContext
from services.diagnose.findings import FindingDraft, Severity


def check(context: RuleContext) -> list[FindingDraft]:
    drafts = []
    for config in context.job.configs:
        runs = [run for run in context.timing_runs(config) if run.nr_periods]
        if not runs or config.cpus is None:
            continue
        periods = sum(run.nr_periods for run in runs)
        throttled = sum(run.nr_throttled or 0 for run in runs)
        share = throttled / periods
        if share < context.thresholds.cpu_throttling_share:
            continue
        throttled_s = statistics.median(run.throttled_s or 0.0 for run in runs)
        if throttled_s < context.thresholds.cpu_throttling_min_s:
            continue
        wall_s = statistics.median(run.wall_s for run in runs)
        # CPUs the command wanted while it was allowed to run: above the quota means
        # more parallelism than the quota pays for.
        demand = statistics.median(
            (run.user_s + run.sys_s) / max(1e-9, run.wall_s - (run.throttled_s or 0.0)) for run in runs
        )
        stalled_share = throttled_s / wall_s if wall_s else 0.0
        severity = Severity.high if stalled_share >= 0.5 else Severity.medium if stalled_share >= 0.2 else Severity.low
        drafts.append(
            FindingDraft(
                kind="cpu_throttling",
                severity=severity,
                title=f"Throttled by the CPU quota in {share:.0%} of periods with {config.label}",
                detail=(
                    f"{throttled} of {periods} CFS periods throttled over {len(runs)} runs "
                    f"(cgroup cpu.stat); median {throttled_s:.3f} s throttled of {wall_s:.3f} s wall per run. "
                    f"While running it used {demand:.1f} CPUs against a quota of {config.cpus:g}: size thread "
                    f"and process pools to the quota, not to os.cpu_count()"
                ),
                config_label=config.label,
                metrics={
                    "throttled_share": share,
                    "nr_periods": periods,
                    "nr_throttled": throttled,
                    "median_throttled_s": throttled_s,
                    "median_wall_s": wall_s,
                    "cpu_demand": demand,
                    "quota_cpus": config.cpus,
                },
            )
        )
    return drafts
