"""futex_storm: futex holds most of the traced syscall time.

Threads that hand work to each other through locks, conditions or queues wait and wake
on futexes; when that dominates the kernel time, the hand-offs are the workload
(docs/explanations/design.md, story 1: futex at 97-99 % of syscall time).

A share of syscall time is no cost (docs/reference/findings.md): a thread pool whose workers sleep in
futex between jobs makes a few hundred calls, which hold most of the syscall time of a
program that makes few others. The finding rises above low only where the wake-ups hold
``futex_min_share`` of the untraced run (futex's system time against the timing median
of the same configuration and test), and says how many there were per second.
"""

from __future__ import annotations

from services.diagnose.context import RuleContext, subject, where
from services.diagnose.findings import FindingDraft, Severity
from services.diagnose.metrics import FutexStormMetrics
from services.evidence import GdbContent, StraceContent, SyscallRow
from services.models import Evidence


def futex_row(content: StraceContent) -> SyscallRow | None:
    return next((row for row in content.syscalls or [] if row.name == "futex"), None)


def check(context: RuleContext) -> list[FindingDraft]:
    limits = context.thresholds
    worst: dict[str | None, tuple[Evidence, SyscallRow, int]] = {}
    for evidence, content in context.evidence_of(StraceContent):
        row = futex_row(content)
        if row is None or row.pct_time < limits.futex_storm_pct or row.calls < limits.futex_min_calls:
            continue
        if evidence.test_id not in worst or row.pct_time > worst[evidence.test_id][1].pct_time:
            # A short test repeated in its evidence run (probes/amplify.py): per run of it.
            worst[evidence.test_id] = (evidence, row, content.run.iterations if content.run else 1)
    drafts = []
    for test_id, (evidence, row, times) in worst.items():
        gil = [e for e, core in context.evidence_of(GdbContent) if e.test_id == test_id and core.waiting_for_gil]
        label = evidence.config.label if evidence.config else None
        median = context.timing_median(label, test_id) if label else None
        share = row.seconds / times / median if median else None
        cost = (
            f"; {row.calls / times / median:.0f} calls per second of the {median:.3f} s untraced median, their "
            f"system time {share:.0%} of it" + (f" (the test ran {times} times in the traced run)" if times > 1 else "")
            if median and share is not None
            else ""
        )
        detail = (
            f"strace -f -c ({where(evidence)}): futex {row.pct_time:.1f} % of syscall time, "
            f"{row.calls} calls, {row.seconds:.3f} s, {row.errors} errors "
            f"({row.usecs_per_call} us per call){cost}. Threads are handing work to each other through locks, "
            f"conditions or queues, and each hand-off is a futex wait and wake"
        )
        costly = share is not None and share >= limits.futex_min_share
        if gil:
            detail += "; at the stall, gdb saw threads waiting for the GIL"
        drafts.append(
            FindingDraft(
                kind="futex_storm",
                severity=(Severity.high if row.pct_time >= limits.futex_storm_high_pct else Severity.medium)
                if costly
                else Severity.low,
                title=f"{subject(test_id)}: futex holds {row.pct_time:.0f} % of syscall time",
                detail=detail,
                config_label=evidence.config.label if evidence.config else None,
                test_id=test_id,
                metrics=FutexStormMetrics(
                    # The wake-ups' system time per run, no more than the untraced run lasts.
                    accounts_s=min(row.seconds / times, median) if median else row.seconds / times,
                    futex_pct_time=row.pct_time,
                    futex_calls=row.calls,
                    futex_seconds=row.seconds,
                    futex_share_of_run=share,
                ),
                evidence_ids=[evidence.id, *(e.id for e in gil)],
            )
        )
    return drafts
