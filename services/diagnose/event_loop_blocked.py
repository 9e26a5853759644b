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

A finding belongs to the test whose coroutine blocked the loop (services/diagnose/
attribution.py): a whole suite drilled as one command reports each slow callback with
its task, and a pytest-asyncio test runs as a task of its own coroutine. The blocked
seconds of each test go to that test's finding, where its page, the catalogue and the
check run show it; what no test's code ran stays the command's.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.diagnose.attribution import named_test, parse_frame, task_frames
from services.diagnose.context import RuleContext, subject, where
from services.diagnose.findings import FindingDraft, Severity, format_seconds
from services.diagnose.metrics import EventLoopBlockedMetrics
from services.evidence import AsyncioLoopContent, BlockingCall
from services.measure.probes.asyncio_loop import TASK_NAME as _TASK_NAME
from services.models import Evidence

# Frames of lagtrace's own hook on the loop thread's stack (probes/asyncio_loop.py).
_HOOK_FILES = ("asyncio-hook", "sitecustomize.py")


@dataclass
class Portion:
    """The blocked time of one subject in one evidence entry."""

    test_id: str | None
    evidence: Evidence
    content: AsyncioLoopContent
    blocked_s: float
    slow_callbacks: int
    calls: list[BlockingCall]
    # The seconds the subject ran: the traced run's wall, or a test's timing median.
    span_s: float | None
    # Found in a drill of the whole command and attributed by the task's coroutine.
    attributed: bool = False


def check(context: RuleContext) -> list[FindingDraft]:
    limits = context.thresholds
    worst: dict[str | None, Portion] = {}
    drilled = context.evidence_of(AsyncioLoopContent)
    unquoted = {e.test_id for e, _ in drilled if e.config is not None and e.config.cpus is None}
    for evidence, content in drilled:
        if evidence.test_id in unquoted and evidence.config is not None and evidence.config.cpus is not None:
            continue  # the quota stretched its callbacks; the unquoted drill tells
        for portion in _portions(context, evidence, content):
            if not portion.calls or portion.blocked_s < limits.event_loop_blocked_min_s:
                continue
            if portion.span_s and portion.blocked_s < limits.event_loop_blocked_share * portion.span_s:
                continue
            known = worst.get(portion.test_id)
            # A test's own drill tells more than its share of the whole command's.
            if known is None or _rank(portion) > _rank(known):
                worst[portion.test_id] = portion
    return [_draft(portion) for portion in worst.values()]


def _rank(portion: Portion) -> tuple[bool, float]:
    return (not portion.attributed, portion.blocked_s)


def _portions(context: RuleContext, evidence: Evidence, content: AsyncioLoopContent) -> list[Portion]:
    """The evidence's blocked time by subject: all of it its own subject's, except in a
    drill of the whole command whose tasks name tests, where each test gets its tasks'."""
    whole = Portion(
        evidence.test_id,
        evidence,
        content,
        content.blocked_s or 0.0,
        content.slow_callbacks or 0,
        content.blocking_calls or [],
        content.wall_s or None,
    )
    if evidence.test_id is not None or not content.tasks or not context.tests:
        return [whole]
    label = evidence.config.label if evidence.config else None
    by_test: dict[str, Portion] = {}
    for task in content.tasks:
        test_id = named_test(task_frames(task.callback, task.functions), context.tests)
        if test_id is None:
            continue
        portion = by_test.get(test_id)
        if portion is None:
            median = context.timing_median(label, test_id) if label else None
            portion = by_test[test_id] = Portion(test_id, evidence, content, 0.0, 0, [], median, attributed=True)
        portion.blocked_s += task.total_s
        portion.slow_callbacks += task.count
        call = _blocking_call(task.functions)
        found = next((c for c in portion.calls if c.call == call), None)
        if found is None:
            stack = [text for text in task.functions if not _in_hook(text)]
            portion.calls.append(BlockingCall(call=call, count=0, total_s=0.0, max_s=0.0, stack=stack))
            found = portion.calls[-1]
        found.count += task.count
        found.total_s += task.total_s
        found.callback = task.callback
    if not by_test:
        return [whole]
    for portion in by_test.values():
        portion.calls.sort(key=lambda call: -call.total_s)
    # What stays the command's: the calls no attributed task made (first seen in another).
    named = {call.callback for portion in by_test.values() for call in portion.calls}
    whole.calls = [call for call in whole.calls if _TASK_NAME.sub("Task ", call.callback or "") not in named]
    whole.blocked_s = max(0.0, whole.blocked_s - sum(p.blocked_s for p in by_test.values()))
    whole.slow_callbacks = max(0, whole.slow_callbacks - sum(p.slow_callbacks for p in by_test.values()))
    return [whole, *by_test.values()]


def _in_hook(text: str) -> bool:
    frame = parse_frame(text)
    return frame is not None and any(hook in frame[1] for hook in _HOOK_FILES)


def _blocking_call(functions: list[str]) -> str:
    """The innermost function on the task's stacks outside lagtrace's hook."""
    return next((text for text in functions if not _in_hook(text)), functions[0] if functions else "?")


def _draft(portion: Portion) -> FindingDraft:
    evidence, content = portion.evidence, portion.content
    test_id, calls, blocked = portion.test_id, portion.calls, portion.blocked_s
    top = calls[0]
    share = (
        f" ({blocked / portion.span_s:.0%} of the {'test' if portion.attributed else 'run'})" if portion.span_s else ""
    )
    quota = evidence.config.cpus if evidence.config is not None else None
    iterations = content.run.iterations if content.run else 1
    callbacks = content.callbacks if not portion.attributed else None
    counted = (
        f"{portion.slow_callbacks} of {callbacks} callbacks"
        if callbacks is not None
        else f"{portion.slow_callbacks} callbacks of its task"
    )
    return FindingDraft(
        kind="event_loop_blocked",
        severity=Severity.medium if quota is None else Severity.low,
        title=(
            f"{subject(test_id)}'s event loop was blocked {format_seconds(blocked)}{share}, "
            f"mostly in {top.call.split(' (')[0]}"
        ),
        detail=(
            f"asyncio callbacks over {format_seconds(content.threshold_s or 0.02)} ({where(evidence)}"
            + (", the whole command drilled: the blocking task ran this test's coroutine" if portion.attributed else "")
            + f"): {counted} blocked the loop for {format_seconds(blocked)} in all; "
            + "; ".join(
                f"{call.call}: {call.count} times, {format_seconds(call.total_s)} in all"
                + (f", longest {format_seconds(call.max_s)}" if call.max_s else "")
                + f" (in {call.callback or '?'})"
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
        metrics=EventLoopBlockedMetrics(
            blocked_s=blocked,
            # What the mechanism takes of one run: the loop stood still this long
            # (per run of a test repeated in its evidence run, probes/amplify.py).
            accounts_s=blocked / (1 if portion.attributed else iterations),
            slow_callbacks=portion.slow_callbacks,
            callbacks=content.callbacks,
            blocking_calls=list(calls),
            attributed_from="the whole command's drill" if portion.attributed else None,
        ),
        evidence_ids=[evidence.id],
    )
