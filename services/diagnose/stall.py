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
            if e.kind in SNAPSHOT_KINDS
            and e.test_id == stall.test_id
            and e.config_id == stall.config_id
            and (stall.run_id is None or e.run_id == stall.run_id)
        ]
        captured = content.get("captured")
        if captured is None:  # evidence stored before the clock said what it took
            captured = sorted({e.kind for e in snapshot if e.content.get("status", "ok") == "ok"})
        not_captured = content.get("not_captured") or []
        ended = "hit the timeout" if content.get("timed_out") else f"ended after {content.get('wall_s', 0):.2f} s"
        clock = (
            f"{content['test_elapsed_s']:.2f} s into the test"
            if content.get("test_elapsed_s") is not None
            else f"{content.get('elapsed_s', 0):.2f} s into the run"
        )
        detail = (
            f"the run ({where(stall)}) was still going {clock}, past the stall threshold of "
            f"{content.get('stall_after_s', 0):.2f} s, and {ended}"
        )
        if content.get("frozen_s") is not None:
            detail += f"; its processes were frozen for {content['frozen_s']:.2f} s while the snapshot was taken"
        detail += f"; taken: {'; '.join(captured) or 'nothing'}"
        if not_captured:
            detail += f"; not taken: {'; '.join(not_captured)}"
        if (content.get("attempts") or 1) > 1:
            detail += f" (the stall came on attempt {content['attempts']})"
        stacks = any("py-spy" in item or "core" in item or item in ("pyspy_dump", "gdb") for item in captured)
        outcome = "stacks captured" if stacks else "no stacks captured"
        drafts.append(
            FindingDraft(
                kind="stall",
                severity=Severity.high if content.get("timed_out") else Severity.medium,
                title=f"{subject(stall.test_id)} stalled past {content.get('stall_after_s', 0):.2f} s; {outcome}",
                detail=detail,
                config_label=stall.config.label if stall.config else None,
                test_id=stall.test_id,
                metrics={
                    key: content.get(key)
                    for key in ("elapsed_s", "stall_after_s", "wall_s", "timed_out", "frozen_s", "attempts")
                },
                evidence_ids=[stall.id, *(e.id for e in snapshot)],
            )
        )
    return drafts
