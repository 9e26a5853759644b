"""stall: an evidence run crossed the stall threshold and was snapshotted while slow.

The finding says what the snapshot holds and what it lacks, in the words the stall
clock's evidence gives (no temporary paths, no raw tool errors).
"""

from __future__ import annotations

from services.diagnose.context import RuleContext, subject, where
from services.diagnose.findings import FindingDraft, Severity
from services.diagnose.metrics import StallMetrics
from services.evidence import StallContent
from services.models import Evidence

SNAPSHOT_KINDS = ("pyspy_dump", "gdb", "faulthandler", "proc_io")


def _stalled_test(context: RuleContext, stall: Evidence, content: StallContent) -> str | None:
    """The test the stall belongs to: the drilled one, or, in a drill of the whole command
    whose clock counts from each test's start (a pytest hook marks it), the test whose
    clock fired, when the job's runs know it by that node id."""
    if stall.test_id is not None:
        return stall.test_id
    if content.clock == "test" and content.test and content.test in context.tests:
        return content.test
    return None


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
        test_id = _stalled_test(context, stall, content)
        if test_id in seen:
            continue
        seen.add(test_id)
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
        whole = ", the whole command drilled: its clock fired in this test" if test_id != stall.test_id else ""
        detail = (
            f"the run ({where(stall)}{whole}) was still going {clock}, past the stall threshold of "
            f"{content.stall_after_s or 0:.2f} s, and {ended}"
        )
        if content.frozen_s is not None:
            detail += f"; its processes were frozen for {content.frozen_s:.2f} s while the snapshot was taken"
        detail += f"; taken: {'; '.join(captured) or 'nothing'}"
        if not_captured:
            detail += f"; not taken: {'; '.join(not_captured)}"
        if (content.attempts or 1) > 1:
            detail += f" (the stall came on attempt {content.attempts})"
        # What the stall took: the stalled run beyond the screen's median of the same
        # configuration and subject (the run's whole length where no median is known); a
        # test's, from its own start where the clock counted from it.
        label = stall.config.label if stall.config else None
        median = context.timing_median(label, test_id) if label else None
        stalled_s = (
            content.test_elapsed_s
            if test_id is not None and stall.test_id is None and content.test_elapsed_s is not None
            else content.wall_s or content.elapsed_s or 0.0
        )
        stacks = any("py-spy" in item or "core" in item or item in ("pyspy_dump", "gdb") for item in captured)
        drafts.append(
            FindingDraft(
                kind="stall",
                severity=Severity.high if content.timed_out else Severity.medium,
                title=f"{subject(test_id)} stalled past {content.stall_after_s or 0:.2f} s; "
                + ("stacks captured" if stacks else "no stacks captured"),
                detail=detail,
                config_label=stall.config.label if stall.config else None,
                test_id=test_id,
                metrics=StallMetrics(
                    accounts_s=max(0.0, stalled_s - (median or 0.0)),
                    elapsed_s=content.elapsed_s,
                    stall_after_s=content.stall_after_s,
                    wall_s=content.wall_s,
                    timed_out=content.timed_out,
                    frozen_s=content.frozen_s,
                    attempts=content.attempts,
                ),
                evidence_ids=[stall.id, *(e.id for e in snapshot)],
            )
        )
    return drafts
