"""stall: an evidence run crossed the stall threshold and was snapshotted while slow."""

from __future__ import annotations

from services.diagnose.context import RuleContext, subject, where
from services.diagnose.findings import FindingDraft, Severity

SNAPSHOT_KINDS = ("pyspy_dump", "gdb", "faulthandler", "proc_io")


def check(context: RuleContext) -> list[FindingDraft]:
    drafts = []
    seen: set[str | None] = set()
    stalls = sorted(context.evidence("stall"), key=lambda e: -(e.content.get("wall_s") or 0))
    for stall in stalls:
        if stall.test_id in seen:
            continue
        seen.add(stall.test_id)
        content = stall.content
        snapshot = [
            e
            for e in context.job.evidence
            if e.kind in SNAPSHOT_KINDS and e.test_id == stall.test_id and e.config_id == stall.config_id
        ]
        taken = sorted({e.kind for e in snapshot if e.content.get("status", "ok") == "ok"})
        missing = sorted({e.kind for e in snapshot} - set(taken))
        ended = "hit the timeout" if content.get("timed_out") else f"ended after {content.get('wall_s', 0):.2f} s"
        detail = (
            f"the run ({where(stall)}) was still going at {content.get('elapsed_s', 0):.2f} s, past the stall "
            f"threshold of {content.get('stall_after_s', 0):.2f} s, and {ended}; "
            f"snapshot taken: {', '.join(taken) or 'none'}"
        )
        if missing:
            detail += f"; could not take: {', '.join(missing)} (the evidence says why)"
        drafts.append(
            FindingDraft(
                kind="stall",
                severity=Severity.high if content.get("timed_out") else Severity.medium,
                title=f"{subject(stall.test_id)} stalled past {content.get('stall_after_s', 0):.2f} s; stacks captured",
                detail=detail,
                config_label=stall.config.label if stall.config else None,
                test_id=stall.test_id,
                metrics={key: content.get(key) for key in ("elapsed_s", "stall_after_s", "wall_s", "timed_out")},
                evidence_ids=[stall.id, *(e.id for e in snapshot)],
            )
        )
    return drafts
