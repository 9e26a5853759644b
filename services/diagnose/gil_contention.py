"""gil_contention: Python threads wait for the GIL while another thread holds it.

Read from the stall snapshot: gdb's py-bt marks threads "Waiting for the GIL", and
py-spy's dump says which thread holds it (active+gil) while others are runnable.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from services.diagnose.context import RuleContext, subject, where
from services.diagnose.findings import FindingDraft, Severity
from services.measure.evidence import CoreThread, DumpedThread, GdbContent, PySpyDumpContent
from services.models import Evidence


def _frame(thread: CoreThread | DumpedThread) -> str:
    if not thread.frames:
        return "no Python frame"
    top = thread.frames[0]
    return f"{top.function} ({top.file.rsplit('/', 1)[-1]}:{top.line})"


@dataclass
class _Witnesses:
    """What each snapshot reader saw of one test (or the command)."""

    gdb: list[tuple[Evidence, list[CoreThread], list[CoreThread]]] = field(default_factory=list)
    pyspy: list[tuple[Evidence, list[DumpedThread], list[DumpedThread]]] = field(default_factory=list)


def check(context: RuleContext) -> list[FindingDraft]:
    found: dict[str | None, _Witnesses] = {}
    for evidence, core in context.evidence_of(GdbContent):
        threads = core.threads or []
        waiting = [t for t in threads if t.waiting_for_gil]
        if waiting and len(threads) >= 2:
            found.setdefault(evidence.test_id, _Witnesses()).gdb.append((evidence, threads, waiting))
    for evidence, dump in context.evidence_of(PySpyDumpContent):
        dumped = dump.threads or []
        holders = [t for t in dumped if t.owns_gil]
        runnable = [t for t in dumped if t.active and not t.owns_gil]
        if holders and runnable:
            found.setdefault(evidence.test_id, _Witnesses()).pyspy.append((evidence, holders, runnable))
    drafts = []
    for test_id, entry in found.items():
        lines = []
        for evidence, threads, waiting in entry.gdb:
            lines.append(
                f"gdb py-bt at the stall ({where(evidence)}): {len(waiting)} of {len(threads)} threads "
                f'"Waiting for the GIL", e.g. thread {waiting[0].id} in {_frame(waiting[0])}'
            )
        for evidence, holders, runnable in entry.pyspy:
            lines.append(
                f"py-spy dump ({where(evidence)}): thread {holders[0].name or holders[0].id} holds the GIL "
                f"(active+gil) in {_frame(holders[0])} while {len(runnable)} other thread(s) are runnable"
            )
        evidence_items = [item[0] for item in entry.gdb] + [item[0] for item in entry.pyspy]
        configs = sorted({e.config.label for e in evidence_items if e.config})
        waiting_max = max((len(item[2]) for item in entry.gdb), default=0)
        drafts.append(
            FindingDraft(
                kind="gil_contention",
                # gdb's marker is direct proof; py-spy's holder/runnable pair alone is a strong hint.
                severity=Severity.high if entry.gdb else Severity.medium,
                title=f"{subject(test_id)}: threads wait for the GIL while another thread holds it",
                detail="; ".join(lines) + ". A thread computing in Python starves the threads that hand work to "
                "each other: move the computation out of the process or away from the hand-off path",
                config_label=configs[0] if len(configs) == 1 else None,
                test_id=test_id,
                metrics={"threads_waiting_for_gil": waiting_max, "configs": configs},
                evidence_ids=[e.id for e in evidence_items],
            )
        )
    return drafts
