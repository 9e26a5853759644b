"""cpu_throttling: the program runs more in parallel than its CPU quota pays for.

The usual cause is parallelism sized to the visible cores (os.cpu_count()) rather than
to the quota: eight workers under a two-CPU quota burn the period's budget in a
fraction of it and then all stand still until the next period.

The program's CPU demand under the quota is (CPU time + throttled time) / wall time:
cgroup cpu.stat's throttled_time is summed over the CPUs whose run queues were held
back (DESIGN.md section 4), so it counts CPU-seconds that runnable threads wanted and
did not get. One thread under cpus=0.5 wants 1 CPU, gets half and is held back the
other half: demand 1.0, slowed by exactly the quota's factor, which is physics and no
finding. Only a demand above both the quota and one CPU (by
``cpu_throttling_min_parallelism``) is: then smaller pools would do the same work
without standing still.
"""

from __future__ import annotations

import statistics

from services.diagnose.context import RuleContext
from services.diagnose.findings import FindingDraft, Severity


def demand(user_s: float, sys_s: float, throttled_s: float, wall_s: float) -> float:
    """CPUs the program wanted, on average over its run."""
    return (user_s + sys_s + throttled_s) / wall_s if wall_s > 0 else 0.0


def check(context: RuleContext) -> list[FindingDraft]:
    limits = context.thresholds
    drafts = []
    for config in context.job.configs:
        runs = [run for run in context.timing_runs(config) if run.nr_periods]
        if not runs or config.cpus is None:
            continue
        periods = sum(run.nr_periods or 0 for run in runs)
        throttled = sum(run.nr_throttled or 0 for run in runs)
        share = throttled / periods
        if share < limits.cpu_throttling_share:
            continue
        wall_s = statistics.median(run.wall_s for run in runs)
        wanted = statistics.median(demand(run.user_s, run.sys_s, run.throttled_s or 0.0, run.wall_s) for run in runs)
        # Wall time held back: the per-CPU sum spread over the CPUs that wanted to run.
        held_s = statistics.median((run.throttled_s or 0.0) for run in runs) / max(1.0, wanted)
        if held_s < limits.cpu_throttling_min_s:
            continue
        if wanted < max(1.0, config.cpus) * limits.cpu_throttling_min_parallelism:
            continue  # one thread slowed by the quota's factor: physics, not a finding
        held_share = held_s / wall_s if wall_s else 0.0
        severity = Severity.high if held_share >= 0.5 else Severity.medium if held_share >= 0.2 else Severity.low
        pools = max(1, int(config.cpus)) if config.cpus >= 1 else 1
        drafts.append(
            FindingDraft(
                kind="cpu_throttling",
                severity=severity,
                title=(
                    f"Runs {wanted:.1f} CPUs in parallel under a {config.cpus:g}-CPU quota: "
                    f"throttled in {share:.0%} of periods with {config.label}"
                ),
                detail=(
                    f"{throttled} of {periods} CFS periods throttled over {len(runs)} runs (cgroup cpu.stat); "
                    f"per run (median) {wall_s:.3f} s wall, of which about {held_s:.3f} s standing still "
                    f"({held_share:.0%}). It wanted {wanted:.1f} CPUs (CPU time plus throttled time, per wall "
                    f"second) against a quota of {config.cpus:g}: its threads or processes outnumber what the "
                    f"quota pays for, so they burn each period's budget early and wait out the rest. Size thread "
                    f"and process pools to the quota ({pools} here: read cpu.max or pass the quota in), not to "
                    f"os.cpu_count(), which counts the host's cores"
                ),
                config_label=config.label,
                metrics={
                    "throttled_share": share,
                    "nr_periods": periods,
                    "nr_throttled": throttled,
                    "median_held_s": held_s,
                    "median_throttled_s": statistics.median((run.throttled_s or 0.0) for run in runs),
                    "median_wall_s": wall_s,
                    "cpu_demand": wanted,
                    "quota_cpus": config.cpus,
                },
            )
        )
    return drafts
