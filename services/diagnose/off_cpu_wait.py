"""off_cpu_wait: the command spends its wall time waiting, not computing.

Wall far above CPU time points at I/O patterns, locks or sleeps rather than at the CPU
(docs/explanations/design.md, story 2: 'CPU-bound' parsing that was really reading a response in 1-byte
chunks). Judged per configuration on median CPU share.

A symptom, never more than low: a wait is where the time goes, not what is wrong with
it. Healthy programs wait by design (the corpus's twins block 3 s on a child, on a
psutil wait, on an event loop's selector, and got a medium here when this was medium at
<= 10 % CPU). The kinds that say what is wrong about a wait (busy_polling, tiny_reads,
event_loop_blocked, a stall's stacks) carry the severity.
"""

from __future__ import annotations

import statistics

from services.diagnose.context import RuleContext
from services.diagnose.findings import FindingDraft, Severity
from services.diagnose.metrics import OffCpuWaitMetrics


def check(context: RuleContext) -> list[FindingDraft]:
    limits = context.thresholds
    worst = None
    for config in context.job.configs:
        runs = context.timing_runs(config)
        if not runs:
            continue
        wall_s = statistics.median(run.wall_s for run in runs)
        cpu_s = statistics.median(run.user_s + run.sys_s for run in runs)
        share = cpu_s / wall_s if wall_s else 1.0
        slow_and_idle = wall_s >= limits.off_cpu_min_wall_s and share <= limits.off_cpu_max_cpu_share
        if slow_and_idle and (worst is None or share < worst[0]):
            worst = (share, config, wall_s, cpu_s, runs)
    if worst is None:
        return []
    share, config, wall_s, cpu_s, runs = worst
    switches = statistics.median(run.voluntary_ctx_switches for run in runs)
    return [
        FindingDraft(
            kind="off_cpu_wait",
            severity=Severity.low,
            title=f"The command waits {1 - share:.0%} of its wall time, off the CPU",
            detail=(
                f"median wall {wall_s:.3f} s but only {cpu_s:.3f} s of CPU (user + sys, rusage) with "
                f"{config.label}: {share:.0%} CPU; {switches:.0f} voluntary context switches per run. "
                f"Look at what it waits for: I/O patterns (many tiny reads), locks, sleeps, a slow peer"
            ),
            config_label=config.label,
            metrics=OffCpuWaitMetrics(
                # The wait: wall time the median run spent off the CPU.
                accounts_s=max(0.0, wall_s - cpu_s),
                cpu_share=share,
                median_wall_s=wall_s,
                median_cpu_s=cpu_s,
                median_voluntary_ctx_switches=switches,
            ),
        )
    ]
