"""gil_contention: Python threads wait for the GIL while another thread holds it.

Read from the stall snapshot: gdb's py-bt marks threads "Waiting for the GIL", and
py-spy's dump says which thread holds it (active+gil) while others are runnable.
"""

from __future__ import annotations

from services.diagnose.context import RuleContext, subject, where
from services.diagnose.findings import FindingDraft


def _frame(thread: dict) -> str:
    frames = thread.get("frames") or []
    if not frames:
        return "no Python frame"
    top = frames[0]
    return f"{top['function']} ({top['file'].rsplit('/', 1)[-1]}:{top['line']})"


def check(context: RuleContext) -> list[FindingDraft]:
    found: dict[str | None, dict] = {}
    for evidence in context.evidence("gdb"):
        threads = evidence.content.get("threads", [])
        waiting = [t for t in threads if t.get("waiting_for_gil")]
        if waiting and len(threads) >= 2:
            entry = found.setdefault(evidence.test_id, {"gdb": [], "pyspy": []})
            entry["gdb"].append((evidence, threads, waiting))
    for evidence in context.evidence("pyspy_dump"):
        threads = evidence.content.get("threads", [])
        holders = [t for t in threads if t.get("owns_gil")]
        runnable = [t for t in threads if t.get("active") and not t.get("owns_gil")]
        if holders and runnable:
            entry = found.setdefault(evidence.test_id, {"gdb": [], "pyspy": []})
            entry["pyspy"].append((evidence, holders, runnable))
    drafts = []
    for test_id, entry in found.items():
        lines = []
        for evidence, threads, waiting in entry["gdb"]:
            lines.append(
                f"gdb py-bt at the stall ({where(evidence)}): {len(waiting)} of {len(threads)} threads "
                f'"Waiting for the GIL", e.g. thread {waiting[0]["id"]} in {_frame(waiting[0])}'
            )
        for evidence, holders, runnable in entry["pyspy"]:
            lines.append(
                f"py-spy dump ({where(evidence)}): thread {holders[0].get('name') or holders[0]['id']} holds the GIL "
                f"(active+gil) in {_frame(holders[0])} while {len(runnable)} other thread(s) are runnable"
            )
        evidence_items = [item[0] for item in entry["gdb"] + entry["pyspy"]]
        configs = sorted({e.config.label for e in evidence_items if e.config})
        waiting_max = max((len(item[2]) for item in entry["gdb"]), default=0)
        drafts.append(
            FindingDraft(
                kind="gil_contention",
                # gdb's marker is direct proof; py-spy's holder/runnable pair alone is a strong hint.
                severity="high" if entry["gdb"] else "medium",
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
