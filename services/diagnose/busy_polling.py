"""busy_polling: a loop of short sleeps, zero-timeout polls or WNOHANG waits.

DESIGN.md story 4: `Popen.wait(timeout)` slept in a loop of growing short sleeps; an
event-driven wait cut voluntary context switches for a 10 s wait from 258 to 2. The
signature is many sleep/poll/wait syscalls per second and many voluntary context
switches per second, at low CPU.
"""

from __future__ import annotations

import statistics

from services.diagnose.context import RuleContext, subject, where
from services.diagnose.findings import FindingDraft, Severity

POLLING_SYSCALLS = frozenset(
    {
        "nanosleep",
        "clock_nanosleep",
        "select",
        "pselect6",
        "poll",
        "ppoll",
        "epoll_wait",
        "epoll_pwait",
        "epoll_pwait2",
        "wait4",
        "waitid",
        "sched_yield",
    }
)


def check(context: RuleContext) -> list[FindingDraft]:
    limits = context.thresholds
    by_label = {config.label: config for config in context.job.configs}
    drafts = []
    seen: set[str | None] = set()
    for evidence in context.evidence("strace"):
        run = context.run_of(evidence)
        config = by_label.get(evidence.config.label) if evidence.config else None
        if run is None or config is None or evidence.test_id in seen:
            continue
        rows = [row for row in evidence.content.get("syscalls", []) if row["name"] in POLLING_SYSCALLS]
        calls = sum(row["calls"] for row in rows)
        calls_per_s = calls / run.wall_s if run.wall_s else 0.0
        timing = context.timing_runs(config)
        if not timing or calls_per_s < limits.busy_polling_min_calls_per_s:
            continue
        wall = statistics.median(r.wall_s for r in timing)
        cpu_share = statistics.median((r.user_s + r.sys_s) / r.wall_s for r in timing if r.wall_s)
        switches_per_s = statistics.median(r.voluntary_ctx_switches / r.wall_s for r in timing if r.wall_s)
        if switches_per_s < limits.busy_polling_min_switches_per_s or cpu_share > limits.busy_polling_max_cpu_share:
            continue
        seen.add(evidence.test_id)
        top = sorted(rows, key=lambda row: row["calls"], reverse=True)[:3]
        drafts.append(
            FindingDraft(
                kind="busy_polling",
                severity=Severity.medium,
                title=f"{subject(evidence.test_id)} polls: {calls_per_s:.0f} sleep/poll/wait syscalls per second",
                detail=(
                    f"strace -f -c ({where(evidence)}): "
                    + ", ".join(f"{row['name']} {row['calls']} calls" for row in top)
                    + f" in a {run.wall_s:.2f} s traced run; the timing runs with {config.label} made "
                    f"{switches_per_s:.0f} voluntary context switches per second at {cpu_share:.0%} CPU "
                    f"(median wall {wall:.3f} s). Wait on an event (a pipe, pidfd, condition, selector with a real "
                    f"timeout) instead of waking up to check"
                ),
                config_label=config.label,
                test_id=evidence.test_id,
                metrics={
                    "polling_calls": calls,
                    "polling_calls_per_s": calls_per_s,
                    "voluntary_switches_per_s": switches_per_s,
                    "cpu_share": cpu_share,
                    "syscalls": {row["name"]: row["calls"] for row in rows},
                },
                evidence_ids=[evidence.id],
            )
        )
    return drafts
