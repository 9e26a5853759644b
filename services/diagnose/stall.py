"""stall: an evidence run crossed the stall threshold and was snapshotted while slow.

The finding says what the snapshot holds and what it lacks, in the words the stall
clock's evidence gives (no temporary paths, no raw tool errors).
"""

from __future__ import annotations

from services.diagnose.context import RuleContext, subject, where
from services.diagnose.findings import FindingDraft, Severity
from services.evidence import StallContent

SNAPSHOT_KINDS = ("pyspy_dump", "gdb", "faulthandler", "proc_io")


def check(context: RuleContext) -> list[FindingDraft]:
    drafts = []
    seen: set[str | None] = set()
    stalls = sorted(
        # A comparison's fast side is snapshotted early on purpose: it did not stall. Nor did
        # a short test repeated in its evidence run (probes/amplify.py), whose deadline
        # falls in a later repetition, unless the run hung to its timeout.
        (
            (e, c)
            for e, c in context.evidence_of(StallContent)
            if not c.comparison and (c.run is None or c.run.iterations == 1 or c.timed_out)
        ),
        key=lambda item: -(item[1].wall_s or 0),
    )
    for stall, content in stalls:
        if stall.test_id in seen:
            continue
        seen.add(stall.test_id)
        snapshot = [
            e
            for e in context.job.evidence
            if e.kind in SNAPSHOT_KINDS
            and e.test_id == stall.test_id
            and e.config_id == stall.config_id
            and (stall.run_id is None or e.run_id == stall.run_id)
        ]
        captured = content.captured
        if captured is None:  # evidence stored before the clock said what it took
            captured = sorted({e.kind for e in snapshot if e.parsed.ok})
        not_captured = content.not_captured or []
        ended = "hit the timeout" if content.timed_out else f"ended after {content.wall_s or 0:.2f} s"
        clock = (
            f"{content.test_elapsed_s:.2f} s into the test"
            if content.test_elapsed_s is not None
            else f"{content.elapsed_s or 0:.2f} s into the run"
        )
        detail = (
            f"the run ({where(stall)}) was still going {clock}, past the stall threshold of "
            f"{content.stall_after_s or 0:.2f} s, and {ended}"
        )
        if content.frozen_s is not None:
            detail += f"; its processes were frozen for {content.frozen_s:.2f} s while the snapshot was taken"
        detail += f"; taken: {'; '.join(captured) or 'nothing'}"
        if not_captured:
            detail += f"; not taken: {'; '.join(not_captured)}"
        if (content.attempts or 1) > 1:
            detail += f" (the stall came on attempt {content.attempts})"
        stacks = any("py-spy" in item or "core" in item or item in ("pyspy_dump", "gdb") for item in captured)
        drafts.append(
            FindingDraft(
                kind="stall",
                severity=Severity.high if content.timed_out else Severity.medium,
                title=f"{subject(stall.test_id)} stalled past {content.stall_after_s or 0:.2f} s; "
                + ("stacks captured" if stacks else "no stacks captured"),
                detail=detail,
                config_label=stall.config.label if stall.config else None,
                test_id=stall.test_id,
                metrics={
                    "elapsed_s": content.elapsed_s,
                    "stall_after_s": content.stall_after_s,
                    "wall_s": content.wall_s,
                    "timed_out": content.timed_out,
                    "frozen_s": content.frozen_s,
                    "attempts": content.attempts,
                },
                evidence_ids=[stall.id, *(e.id for e in snapshot)],
            )
        )
    return drafts
