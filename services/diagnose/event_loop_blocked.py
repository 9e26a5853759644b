"""event_loop_blocked: an asyncio event loop held up by synchronous work in its callbacks.

docs/explanations/design.md, story 3: coroutines logging through a slow synchronous handler; every log
call blocked the loop, and with it every other coroutine, for a network round trip.

What the loop lost is the sum of the time its callbacks held it, not the longest one:
120 callbacks of 15 ms block it 1.8 s though none passes a per-callback line. The
asyncio_loop probe counts every callback from Thresholds.event_loop_blocked_floor_s on
(a healthy loop's take microseconds to about 1 ms), and the rule fires on that time's
cost: its share of the run and its seconds (docs/reference/findings.md). The callbacks
past the probe's stack threshold (20 ms) carry the loop thread's stack, which names the
blocking call; where they hold most of the time the finding names it, else it says the
loop was blocked by many short callbacks and names the callbacks that held it most.

No per-callback line decides on its own. Callbacks under the floor that each compute a
few milliseconds (an asyncio server hashing each request for 3-4 ms) block the loop as
much, and the probe's heartbeat, a timer due every 5 ms, sees it: behind such a batch it
fires tens of milliseconds late. The time it fired at least the floor late, less the
time the kernel kept the process waiting for a CPU (runs.run_delay_s), and at most the
loop thread's CPU time in callbacks of a millisecond or more, is blocked time too: the
CPU bound tells the loop's own work from a callback that waited for the GIL another
thread held (gil_contention's, which grows a callback as long and computes nothing) and
from a healthy loop saturated by thousands of microsecond callbacks, whose timer is late
now and then though no callback is heavy (tests/unit/services/diagnose/
test_event_loop_blocked.py).

Blocking is measured where no quota stretches it (docs/reference/findings.md): under cpus=0.5 the whole
process stands still now and then, and whatever callback is running grows past the
threshold for no fault of its own (a healthy asyncio echo server's 1 ms callbacks grew to
50 ms). Evidence from a configuration with a quota counts only where no configuration
without one was drilled, and then as a low note.

A finding belongs to the test whose coroutine blocked the loop (services/diagnose/
attribution.py): a whole suite drilled as one command reports each callback with its
task, and a pytest-asyncio test runs as a task of its own coroutine. The blocked
seconds of each test go to that test's finding, where its page, the catalogue and the
check run show it; what no test's code ran stays the command's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from services.diagnose.attribution import named_test, parse_frame, task_frames
from services.diagnose.context import RuleContext, subject, where
from services.diagnose.findings import FindingDraft, Severity, format_seconds
from services.diagnose.metrics import EventLoopBlockedMetrics
from services.evidence import AsyncioLoopContent, BlockingCall, CallbackTime, DurationBucket, TaskBlocking
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
    # Every callback's time from the floor on (older evidence: the slow callbacks' alone).
    blocked_s: float
    slow_callbacks: int
    calls: list[BlockingCall]  # named from the slow callbacks' stacks
    # The seconds the subject ran: the traced run's wall, or a test's timing median.
    span_s: float | None
    # Found in a drill of the whole command and attributed by the task's coroutine.
    attributed: bool = False
    held_callbacks: int = 0  # callbacks from the floor on
    callers: list[CallbackTime] = field(default_factory=list)  # by description, worst first
    # Blocked time read from the heartbeat's lateness (the whole run's loop only): see
    # above; and the callbacks' own from the floor on, before the larger was taken.
    late_s: float = 0.0
    held_s: float | None = None

    @property
    def slow_s(self) -> float:
        return sum(call.total_s for call in self.calls)

    @property
    def named_by_stack(self) -> bool:
        """The stacks account for most of the blocked time: the call they name is the
        cause. Else the loop was blocked by callbacks too short to have a stack taken."""
        return bool(self.calls) and self.slow_s >= self.blocked_s / 2


def check(context: RuleContext) -> list[FindingDraft]:
    limits = context.thresholds
    worst: dict[str | None, Portion] = {}
    drilled = context.evidence_of(AsyncioLoopContent)
    unquoted = {e.test_id for e, _ in drilled if e.config is not None and e.config.cpus is None}
    for evidence, content in drilled:
        if evidence.test_id in unquoted and evidence.config is not None and evidence.config.cpus is not None:
            continue  # the quota stretched its callbacks; the unquoted drill tells
        for portion in _portions(context, evidence, content):
            # The blocked time's cost decides, in seconds and as a share of the run.
            if not (portion.calls or portion.callers or portion.late_s):
                continue
            if portion.blocked_s < limits.event_loop_blocked_min_s:
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
    measured = content.held_s is not None
    whole = Portion(
        evidence.test_id,
        evidence,
        content,
        (content.held_s if measured else content.blocked_s) or 0.0,
        content.slow_callbacks or 0,
        list(content.blocking_calls or []),
        content.wall_s or None,
        held_callbacks=(content.held_callbacks if measured else content.slow_callbacks) or 0,
        callers=list(content.callers or []),
    )
    late = _late_blocked(evidence, content)
    if evidence.test_id is not None or not (content.tasks or content.callers) or not context.tests:
        return [_with_late(whole, late)]
    label = evidence.config.label if evidence.config else None
    tasks = {task.callback: task for task in content.tasks or []}
    by_test: dict[str, Portion] = {}

    def portion_of(test_id: str) -> Portion:
        portion = by_test.get(test_id)
        if portion is None:
            median = context.timing_median(label, test_id) if label else None
            portion = by_test[test_id] = Portion(test_id, evidence, content, 0.0, 0, [], median, attributed=True)
        return portion

    # Each caller's (or, in older evidence, each slow task's) time goes to its test.
    for caller in content.callers if measured and content.callers is not None else []:
        task = tasks.get(caller.callback)
        test_id = named_test(task_frames(caller.callback, task.functions if task else []), context.tests)
        if test_id is not None:
            portion = portion_of(test_id)
            portion.blocked_s += caller.total_s
            portion.held_callbacks += caller.count
            portion.callers.append(caller)
    for task in tasks.values():
        test_id = named_test(task_frames(task.callback, task.functions), context.tests)
        if test_id is None:
            continue
        portion = portion_of(test_id)
        if not measured:
            portion.blocked_s += task.total_s
            portion.held_callbacks += task.count
        portion.slow_callbacks += task.count
        _add_task_call(portion, task)
    if not by_test:
        return [_with_late(whole, late)]
    for portion in by_test.values():
        portion.calls.sort(key=lambda call: -call.total_s)
    # What stays the command's: the calls and callers no attributed task made.
    named = {call.callback for portion in by_test.values() for call in portion.calls}
    named |= {caller.callback for portion in by_test.values() for caller in portion.callers}
    whole.calls = [call for call in whole.calls if _TASK_NAME.sub("Task ", call.callback or "") not in named]
    whole.callers = [caller for caller in whole.callers if caller.callback not in named]
    whole.blocked_s = max(0.0, whole.blocked_s - sum(p.blocked_s for p in by_test.values()))
    whole.slow_callbacks = max(0, whole.slow_callbacks - sum(p.slow_callbacks for p in by_test.values()))
    whole.held_callbacks = max(0, whole.held_callbacks - sum(p.held_callbacks for p in by_test.values()))
    # The heartbeat's lateness is the whole loop's: what the tests' own callbacks held is theirs.
    return [_with_late(whole, max(0.0, late - sum(p.blocked_s for p in by_test.values()))), *by_test.values()]


def _late_blocked(evidence: Evidence, content: AsyncioLoopContent) -> float:
    """The loop's blocked time as its heartbeat saw it (the module's docstring): the time it
    fired at least the floor late, less the process's run-queue delay, at most the loop
    thread's CPU time in its heavy callbacks. 0 where the probe predates either count."""
    heartbeat, heavy, floor = content.heartbeat, content.heavy, content.floor_s
    if heartbeat is None or heavy is None or floor is None:
        return 0.0
    late, lower = 0.0, 0.0
    for bucket in heartbeat.lags:
        if lower >= floor * (1 - 1e-9):
            late += bucket.total_s
        lower = bucket.upper_s if bucket.upper_s is not None else lower
    waited = (evidence.run.run_delay_s if evidence.run is not None else None) or 0.0
    return max(0.0, min(late - waited, heavy.cpu_s))


def _with_late(portion: Portion, late: float) -> Portion:
    """The portion's blocked time: its callbacks' from the floor on, or its heartbeat's."""
    portion.late_s, portion.held_s = late, portion.blocked_s
    portion.blocked_s = max(portion.blocked_s, late)
    return portion


def _add_task_call(portion: Portion, task: TaskBlocking) -> None:
    call = _blocking_call(task.functions)
    found = next((c for c in portion.calls if c.call == call), None)
    if found is None:
        stack = [text for text in task.functions if not _in_hook(text)]
        portion.calls.append(BlockingCall(call=call, count=0, total_s=0.0, max_s=0.0, stack=stack))
        found = portion.calls[-1]
    found.count += task.count
    found.total_s += task.total_s
    found.callback = task.callback


def _in_hook(text: str) -> bool:
    frame = parse_frame(text)
    return frame is not None and any(hook in frame[1] for hook in _HOOK_FILES)


def _blocking_call(functions: list[str]) -> str:
    """The innermost function on the task's stacks outside lagtrace's hook."""
    return next((text for text in functions if not _in_hook(text)), functions[0] if functions else "?")


def _short(callback: str) -> str:
    """ "Task handle (/srv/app/server.py:30)" as "Task handle (server.py:30)"."""
    head, _, place = callback.partition(" (")
    return f"{head} ({place.rsplit('/', 1)[-1]}" if place else head


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:g} ms"


def _durations(buckets: list[DurationBucket]) -> str:
    """The buckets that hold callbacks: "246 up to 1 ms, 120 of 10-20 ms"."""
    parts, lower = [], 0.0
    for bucket in buckets:
        if bucket.count:
            if bucket.upper_s is None:
                parts.append(f"{bucket.count} over {_ms(lower)}")
            elif not lower:
                parts.append(f"{bucket.count} up to {_ms(bucket.upper_s)}")
            else:
                parts.append(f"{bucket.count} of {_ms(lower)}-{_ms(bucket.upper_s)}")
        lower = bucket.upper_s or lower
    return ", ".join(parts)


def _draft(portion: Portion) -> FindingDraft:
    evidence, content = portion.evidence, portion.content
    test_id, calls, blocked = portion.test_id, portion.calls, portion.blocked_s
    measured = content.held_s is not None
    floor = content.floor_s if measured else content.threshold_s
    share = (
        f" ({blocked / portion.span_s:.0%} of the {'test' if portion.attributed else 'run'})" if portion.span_s else ""
    )
    quota = evidence.config.cpus if evidence.config is not None else None
    iterations = content.run.iterations if content.run else 1
    callbacks = content.callbacks if not portion.attributed else None
    counted = (
        f"{portion.held_callbacks} of {callbacks} callbacks"
        if callbacks is not None
        else f"{portion.held_callbacks} callbacks of its task"
    )
    held_s = portion.held_s if portion.held_s is not None else blocked
    by_heartbeat = portion.late_s > held_s
    heavy = content.heavy
    if portion.named_by_stack and not by_heartbeat:
        cause = f"mostly in {calls[0].call.split(' (')[0]}"
    elif by_heartbeat and heavy is not None:
        cause = (
            f"by {heavy.count} callbacks of {format_seconds(heavy.from_s)} or more, "
            f"most under {format_seconds(floor or 0.0)}"
        )
    else:
        cause = f"by {portion.held_callbacks} short callbacks, mostly {_short(portion.callers[0].callback)}"
    parts = [
        f"asyncio callbacks from {format_seconds(floor or 0.02)} on ({where(evidence)}"
        + (", the whole command drilled: the blocking task ran this test's coroutine" if portion.attributed else "")
        + f"): {counted} held the loop {format_seconds(held_s)} in all"
        + (f" (every callback's duration: {_durations(content.durations)})" if content.durations and callbacks else "")
    ]
    heartbeat = content.heartbeat
    lag_s = sum(caller.lag_s for caller in portion.callers) if portion.attributed else None
    if heartbeat is not None and heartbeat.beats and not portion.attributed:
        parts.append(
            f"a timer due every {format_seconds(heartbeat.period_s)} fired {heartbeat.late_beats} of "
            f"{heartbeat.beats} times at least {format_seconds(floor or 0.0)} late, "
            f"{format_seconds(heartbeat.lag_total_s)} late in all, {format_seconds(heartbeat.lag_max_s)} at most"
        )
    elif lag_s:
        parts.append(f"a timer due every few milliseconds fired {format_seconds(lag_s)} late in all behind them")
    if by_heartbeat and heavy is not None:
        parts.append(
            f"{heavy.count} callbacks of {format_seconds(heavy.from_s)} or more ran {format_seconds(heavy.cpu_s)} of "
            f"CPU on the loop's thread in {format_seconds(heavy.total_s)}: the loop was blocked "
            f"{format_seconds(portion.late_s)} by them, as its timer's lateness counts it (less the time the process "
            "waited for a CPU)"
        )
    if portion.callers:
        parts.append(
            ("the callbacks that held it most: " if not portion.named_by_stack else "by callback: ")
            + "; ".join(
                f"{caller.callback}: {caller.count} times, {format_seconds(caller.total_s)} in all, "
                f"longest {format_seconds(caller.max_s)}"
                for caller in portion.callers[:3]
            )
        )
    if not portion.named_by_stack and measured and not by_heartbeat:
        parts.append(
            "the loop was blocked by many short callbacks: "
            + (
                f"only {portion.slow_callbacks} ran over {format_seconds(content.threshold_s or 0.02)} and had "
                "their stack taken"
                if calls
                else f"none ran over {format_seconds(content.threshold_s or 0.02)}, where the probe takes the "
                "loop thread's stack; profile the callbacks named (py-spy) to find the synchronous call"
            )
        )
    if calls:
        parts.append(
            ("over " + format_seconds(content.threshold_s or 0.02) + ", with the loop thread's stack: ")
            + "; ".join(
                f"{call.call}: {call.count} times, {format_seconds(call.total_s)} in all"
                + (f", longest {format_seconds(call.max_s)}" if call.max_s else "")
                + f" (in {call.callback or '?'})"
                for call in calls[:3]
            )
        )
        parts.append("the loop thread's stack while blocked (innermost first): " + " <- ".join(calls[0].stack[:8]))
    advice = (
        "Move the synchronous work off the loop: run_in_executor / asyncio.to_thread, or for "
        "logging a QueueHandler with a QueueListener thread"
        + (
            f". Measured only under a {quota:g}-CPU quota, which stretches every callback it "
            "throttles: drill a configuration without one to tell"
            if quota is not None
            else ""
        )
    )
    return FindingDraft(
        kind="event_loop_blocked",
        severity=Severity.medium if quota is None else Severity.low,
        title=f"{subject(test_id)}'s event loop was blocked {format_seconds(blocked)}{share}, {cause}",
        detail="; ".join(parts) + ". " + advice,
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
            floor_s=content.floor_s if measured else None,
            held_callbacks=portion.held_callbacks if measured else None,
            busiest_callbacks=portion.callers[:3] if measured else None,
            heartbeat_lag_s=(heartbeat.lag_total_s if heartbeat and not portion.attributed else lag_s)
            if measured
            else None,
            heartbeat_lag_max_s=heartbeat.lag_max_s if heartbeat and measured and not portion.attributed else None,
            heartbeat_blocked_s=portion.late_s if portion.late_s else None,
            heavy_callbacks=heavy.count if heavy is not None and by_heartbeat else None,
            heavy_cpu_s=heavy.cpu_s if heavy is not None and by_heartbeat else None,
        ),
        evidence_ids=[evidence.id],
    )
