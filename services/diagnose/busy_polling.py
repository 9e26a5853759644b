"""busy_polling: waiting by waking up to check (short sleeps, WNOHANG waits), not on an event.

docs/explanations/design.md, story 4: `Popen.wait(timeout)` (and psutil 5.x's `Process.wait(timeout)`)
sleep in a loop of growing short sleeps around a non-blocking waitpid; an event-driven
wait cut voluntary context switches for a 10 s wait from 258 to 2. Slow pollers count
too: tens of wake-ups per second at almost no CPU over a long wait.

Only sleeps and non-blocking waits are counted; under 100 a second, only sleeps paired
with as many non-blocking checks (a WNOHANG waitpid) make a poller. A selector wait (epoll_wait, poll,
select) is how a healthy event loop blocks until something happens; counting it would
flag every asyncio program with timers.
"""

from __future__ import annotations

import statistics

from services.diagnose.context import RuleContext, subject, where
from services.diagnose.findings import FindingDraft, Severity
from services.diagnose.metrics import BusyPollingMetrics
from services.evidence import StraceContent

SLEEPS = frozenset({"nanosleep", "clock_nanosleep", "sched_yield"})
# Non-blocking checks a poller makes between its sleeps (waitpid with WNOHANG).
CHECKS = frozenset({"wait4", "waitid"})
POLLING_SYSCALLS = SLEEPS | CHECKS


def check(context: RuleContext) -> list[FindingDraft]:
    limits = context.thresholds
    by_label = {config.label: config for config in context.job.configs}
    drafts = []
    seen: set[str | None] = set()
    for evidence, content in context.evidence_of(StraceContent):
        run = context.run_of(evidence)
        config = by_label.get(evidence.config.label) if evidence.config else None
        if run is None or config is None or evidence.test_id in seen or run.wall_s < limits.busy_polling_min_wall_s:
            continue
        rows = [row for row in content.syscalls or [] if row.name in POLLING_SYSCALLS]
        calls = sum(row.calls for row in rows)
        calls_per_s = calls / run.wall_s
        # A test's CPU and context switches are not measured alone in the timing runs (they
        # hold the whole suite): its own evidence run, the test narrowed (and repeated), stands in.
        timing = (
            [run] if evidence.test_id else [r for r in context.timing_runs(config) if r.wall_s and r.exit_code == 0]
        )
        if not timing or calls < limits.busy_polling_min_calls or calls_per_s < limits.busy_polling_min_calls_per_s:
            continue
        sleeps = sum(row.calls for row in rows if row.name in SLEEPS)
        checks = calls - sleeps
        if calls_per_s < limits.busy_polling_fast_per_s and checks < limits.busy_polling_min_checks_per_sleep * sleeps:
            continue
        wall = statistics.median(r.wall_s for r in timing)
        cpu_share = statistics.median((r.user_s + r.sys_s) / r.wall_s for r in timing)
        switches_per_s = statistics.median(r.voluntary_ctx_switches / r.wall_s for r in timing)
        if switches_per_s < limits.busy_polling_min_switches_per_s or cpu_share > limits.busy_polling_max_cpu_share:
            continue
        seen.add(evidence.test_id)
        times = content.run.iterations if content.run else 1
        polled_s = sum(row.seconds for row in rows)
        top = sorted(rows, key=lambda row: row.calls, reverse=True)[:3]
        slow_poller = calls_per_s < limits.busy_polling_fast_per_s
        drafts.append(
            FindingDraft(
                kind="busy_polling",
                severity=Severity.medium,
                title=(
                    f"{subject(evidence.test_id)} polls: {calls_per_s:.0f} sleep/wait wake-ups per second "
                    f"at {cpu_share:.0%} CPU"
                ),
                detail=(
                    f"strace -f -c ({where(evidence)}): "
                    + ", ".join(f"{row.name} {row.calls} calls" for row in top)
                    + f" in a {run.wall_s:.2f} s traced run; "
                    + ("that run" if evidence.test_id else f"the timing runs with {config.label}")
                    + " made "
                    f"{switches_per_s:.0f} voluntary context switches per second at {cpu_share:.0%} CPU "
                    f"(median wall {wall:.3f} s). "
                    + (
                        "A slow poller: each wake-up finds nothing and sleeps again, and the wait ends up to one "
                        "sleep late (psutil 5.x Process.wait(timeout), subprocess Popen.wait(timeout) poll this way). "
                        if slow_poller
                        else ""
                    )
                    + "Wait on an event instead: a blocking waitpid or Popen.wait() without a timeout, a pidfd, "
                    "a pipe, a condition, or a selector with a real timeout"
                ),
                config_label=config.label,
                test_id=evidence.test_id,
                metrics=BusyPollingMetrics(
                    # What waking up to check costs: the polling syscalls' system time
                    # (strace -c) per run of the subject, and the lateness of the wait's
                    # end, half a poll interval on average (what it waits for happens
                    # while it sleeps: Popen.wait(timeout) sleeps up to 50 ms, and its
                    # nanosleeps took 0.000 s of system time on one core,
                    # tests/unit/services/diagnose/test_busy_polling.py); no more than the
                    # untraced run lasts. The wait itself is the peer's (a child, a
                    # socket): polling does not make it.
                    accounts_s=min(polled_s / times + (run.wall_s / sleeps / 2 if sleeps else 0.0), wall),
                    polling_calls=calls,
                    polling_calls_per_s=calls_per_s,
                    voluntary_switches_per_s=switches_per_s,
                    cpu_share=cpu_share,
                    syscalls={row.name: row.calls for row in rows},
                ),
                evidence_ids=[evidence.id],
            )
        )
    return drafts
