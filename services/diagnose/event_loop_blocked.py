"""event_loop_blocked: an asyncio event loop held up by synchronous work in a callback.

docs/explanations/design.md, story 3: coroutines logging through a slow synchronous handler; every log
call blocked the loop, and with it every other coroutine, for a network round trip.
The asyncio_loop probe reports each callback that ran past its threshold with the loop
thread's stack taken while it was stuck, so the finding names the blocking call, how
often it blocked and for how long.

Blocking is measured where no quota stretches it (docs/reference/findings.md): under cpus=0.5 the whole
process stands still now and then, and whatever callback is running grows past the
threshold for no fault of its own (a healthy asyncio echo server's 1 ms callbacks grew to
50 ms). Evidence from a configuration with a quota counts only where no configuration
without one was drilled, and then as a low note.
"""

from __future__ import annotations

from services.diagnose.context import RuleContext, subject, where
from services.diagnose.findings import FindingDraft, Severity, format_seconds
from services.evidence import AsyncioLoopContent
from services.models import Evidence


def check(context: RuleContext) -> list[FindingDraft]:
    limits = context.thresholds
    worst: dict[str | None, tuple[Evidence, AsyncioLoopContent]] = {}
    drilled = context.evidence_of(AsyncioLoopContent)
    unquoted = {e.test_id for e, _ in drilled if e.config is not None and e.config.cpus is None}
    for evidence, content in drilled:
        if evidence.test_id in unquoted and evidence.config is not None and evidence.config.cpus is not None:
            continue  # the quota stretched its callbacks; the unquoted drill tells
        blocked, wall = content.blocked_s or 0.0, content.wall_s or 0.0
        if not content.blocking_calls or blocked < limits.event_loop_blocked_min_s:
            continue
        if wall and blocked < limits.event_loop_blocked_share * wall:
            continue
        if evidence.test_id not in worst or blocked > (worst[evidence.test_id][1].blocked_s or 0.0):
            worst[evidence.test_id] = (evidence, content)
    drafts = []
    for test_id, (evidence, content) in worst.items():
        calls = content.blocking_calls or []
        top = calls[0]
        blocked, wall = content.blocked_s or 0.0, content.wall_s or 0.0
        share = f" ({blocked / wall:.0%} of the run)" if wall else ""
        quota = evidence.config.cpus if evidence.config is not None else None
        drafts.append(
            FindingDraft(
                kind="event_loop_blocked",
                severity=Severity.medium if quota is None else Severity.low,
                title=(
                    f"{subject(test_id)}'s event loop was blocked {format_seconds(blocked)}{share}, "
                    f"mostly in {top.call.split(' (')[0]}"
                ),
                detail=(
                    f"asyncio callbacks over {format_seconds(content.threshold_s or 0.02)} ({where(evidence)}): "
                    f"{content.slow_callbacks} of {content.callbacks} callbacks blocked the loop for "
                    f"{format_seconds(blocked)} in all; "
                    + "; ".join(
                        f"{call.call}: {call.count} times, {format_seconds(call.total_s)} in all, "
                        f"longest {format_seconds(call.max_s)} (in {call.callback or '?'})"
                        for call in calls[:3]
                    )
                    + ". The loop thread's stack while blocked (innermost first): "
                    + " <- ".join(top.stack[:8])
                    + ". Move the synchronous work off the loop: run_in_executor / asyncio.to_thread, or for "
                    "logging a QueueHandler with a QueueListener thread"
                    + (
                        f". Measured only under a {quota:g}-CPU quota, which stretches every callback it "
                        "throttles: drill a configuration without one to tell"
                        if quota is not None
                        else ""
                    )
                ),
                config_label=evidence.config.label if evidence.config else None,
                test_id=test_id,
                metrics={
                    "blocked_s": blocked,
                    "slow_callbacks": content.slow_callbacks,
                    "callbacks": content.callbacks,
                    "blocking_calls": [call.model_dump() for call in calls],
                },
                evidence_ids=[evidence.id],
            )
        )
    return drafts
