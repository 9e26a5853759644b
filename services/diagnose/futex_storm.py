"""futex_storm: futex holds most of the traced syscall time.

Threads that hand work to each other through locks, conditions or queues wait and wake
on futexes; when that dominates the kernel time, the hand-offs are the workload
(DESIGN.md story 1: futex at 97-99 % of syscall time).
"""

from __future__ import annotations

from services.diagnose.context import RuleContext, subject, where
from services.diagnose.findings import FindingDraft, Severity
from services.measure.evidence import GdbContent, StraceContent, SyscallRow
from services.models import Evidence


def futex_row(content: StraceContent) -> SyscallRow | None:
    return next((row for row in content.syscalls or [] if row.name == "futex"), None)


def check(context: RuleContext) -> list[FindingDraft]:
    limits = context.thresholds
    worst: dict[str | None, tuple[Evidence, SyscallRow]] = {}
    for evidence, content in context.evidence_of(StraceContent):
        row = futex_row(content)
        if row is None or row.pct_time < limits.futex_storm_pct or row.calls < limits.futex_min_calls:
            continue
        if evidence.test_id not in worst or row.pct_time > worst[evidence.test_id][1].pct_time:
            worst[evidence.test_id] = (evidence, row)
    drafts = []
    for test_id, (evidence, row) in worst.items():
        gil = [e for e, core in context.evidence_of(GdbContent) if e.test_id == test_id and core.waiting_for_gil]
        detail = (
            f"strace -f -c ({where(evidence)}): futex {row.pct_time:.1f} % of syscall time, "
            f"{row.calls} calls, {row.seconds:.3f} s, {row.errors} errors "
            f"({row.usecs_per_call} us per call). Threads are handing work to each other through locks, "
            f"conditions or queues, and each hand-off is a futex wait and wake"
        )
        if gil:
            detail += "; at the stall, gdb saw threads waiting for the GIL"
        drafts.append(
            FindingDraft(
                kind="futex_storm",
                severity=Severity.high if row.pct_time >= 95 else Severity.medium,
                title=f"{subject(test_id)}: futex holds {row.pct_time:.0f} % of syscall time",
                detail=detail,
                config_label=evidence.config.label if evidence.config else None,
                test_id=test_id,
                metrics={
                    "futex_pct_time": row.pct_time,
                    "futex_calls": row.calls,
                    "futex_seconds": row.seconds,
                },
                evidence_ids=[evidence.id, *(e.id for e in gil)],
            )
        )
    return drafts
