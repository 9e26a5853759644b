"""gil_contention: Python threads wait for the GIL while another thread holds it.

The first witness works on any interpreter: just before the stall deadline the clock
looks at every thread about forty times, and a thread blocked in futex on an address
inside the interpreter's ``_PyRuntime`` waits for the GIL (stall_clock.py
``gil_samples``: no debug symbols, no gdb extension). Read in the slow and in the fast
configuration, it says how much of the slowdown the waits account for: three threads on
one core queue for the GIL a little too; the cause is the difference.

gdb's py-bt ("Waiting for the GIL") and py-spy's dump (a GIL holder while others are
runnable) at the frozen instant are further witnesses where they are available.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from services.diagnose.context import RuleContext, subject, where
from services.diagnose.findings import FindingDraft, Severity
from services.diagnose.findings import format_seconds as _s
from services.diagnose.metrics import GilContentionMetrics
from services.evidence import (
    CoreThread,
    DumpedThread,
    EvidenceStatus,
    GdbContent,
    GilSamples,
    PySpyDumpContent,
    StallContent,
)
from services.models import Evidence


def _frame(thread: CoreThread | DumpedThread) -> str:
    if not thread.frames:
        return "no Python frame"
    top = thread.frames[0]
    return f"{top.function} ({top.file.rsplit('/', 1)[-1]}:{top.line})"


@dataclass
class _Witnesses:
    """What each reader saw of one test (or the command)."""

    samples: dict[str, tuple[Evidence, GilSamples]] = field(default_factory=dict)  # by configuration
    gdb: list[tuple[Evidence, list[CoreThread], list[CoreThread]]] = field(default_factory=list)
    pyspy: list[tuple[Evidence, list[DumpedThread], list[DumpedThread]]] = field(default_factory=list)


def _sampled(samples: GilSamples) -> str:
    return f"{samples.with_waiter} of {samples.samples} looks"


def check(context: RuleContext) -> list[FindingDraft]:
    limits = context.thresholds
    found: dict[str | None, _Witnesses] = {}
    # A run that ended before its deadline was still looked at while it ran.
    for evidence, stall in context.evidence_of(StallContent, also=(EvidenceStatus.no_stall,)):
        samples = stall.gil_samples
        if samples is not None and samples.samples and evidence.config is not None:
            found.setdefault(evidence.test_id, _Witnesses()).samples[evidence.config.label] = (evidence, samples)
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
        # Stated only where the GIL was sampled in both the slow and the fast configuration.
        accounts_s: float | None = None
        slow_vs_fast: str | None = None
        gil_wait_share: dict[str, float] | None = None
        lines: list[str] = []
        severity: Severity | None = None
        pair = context.drill_pair(test_id)
        if entry.samples:
            if pair is not None and pair.slow in entry.samples and pair.fast in entry.samples:
                slow, fast = entry.samples[pair.slow][1], entry.samples[pair.fast][1]
                slow_median = context.timing_median(pair.slow, test_id) or 0.0
                fast_median = context.timing_median(pair.fast, test_id) or 0.0
                waited_slow, waited_fast = slow.share * slow_median, fast.share * fast_median
                # Where the fast configuration waited as long or longer, the waits account
                # for none of the slowdown: nothing, not negative seconds (a page showed
                # "accounts_s -15368 µs" for a test whose fast side queued for the GIL more).
                accounts = max(0.0, waited_slow - waited_fast)
                slowdown = slow_median - fast_median
                compared = (
                    f"in {pair.slow} a thread waited for the GIL in {_sampled(slow)}; in {pair.fast}, {_sampled(fast)}"
                )
                accounts_s, slow_vs_fast = round(accounts, 6), compared
                gil_wait_share = {pair.slow: round(slow.share, 3), pair.fast: round(fast.share, 3)}
                lines.append(
                    f"{compared}: about {_s(waited_slow)} of the {_s(slow_median)} median waiting for it, "
                    f"against {_s(waited_fast)} of {_s(fast_median)}"
                    + ("" if accounts > 0 else ": the waits account for none of the difference")
                )
                symptom = slow_median >= limits.cpu_sensitivity_ratio * fast_median and slowdown > 0
                if slow.share >= limits.gil_wait_share and not symptom:
                    severity = Severity.low  # waits, but no slowdown between the two for them to explain
                elif symptom and slow.share >= limits.gil_compared_min_share:
                    # What the waits cost decides: their seconds against the slowdown's.
                    if accounts >= limits.gil_min_share_of_slowdown * slowdown:
                        severity = (
                            Severity.high
                            if accounts >= limits.gil_high_share_of_slowdown * slowdown
                            else Severity.medium
                        )
                    elif accounts > 0 and slow.share >= limits.gil_wait_share:
                        severity = Severity.low
            else:
                label, (evidence, samples) = max(entry.samples.items(), key=lambda item: item[1][1].share)
                lines.append(f"in {label} a thread waited for the GIL in {_sampled(samples)} before the deadline")
                if samples.share >= limits.gil_wait_share:
                    severity = Severity.medium
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
        if not entry.samples:
            # No repeated looks (an older clock, a crash): one frozen instant is the witness.
            severity = Severity.high if entry.gdb else Severity.medium
        elif severity is None:
            continue  # looked at repeatedly: the waits do not account for the slowdown
        evidence_items = (
            [e for e, _ in entry.samples.values()] + [i[0] for i in entry.gdb] + [i[0] for i in entry.pyspy]
        )
        configs = sorted({e.config.label for e in evidence_items if e.config})
        waiting_max = max((len(item[2]) for item in entry.gdb), default=0)
        drafts.append(
            FindingDraft(
                kind="gil_contention",
                severity=severity,
                title=f"{subject(test_id)}: threads wait for the GIL while another thread holds it",
                detail="; ".join(lines) + ". A thread computing in Python starves the threads that hand work to "
                "each other: move the computation out of the process or away from the hand-off path",
                config_label=pair.slow if pair is not None else configs[0] if len(configs) == 1 else None,
                test_id=test_id,
                metrics=GilContentionMetrics(
                    threads_waiting_for_gil=waiting_max,
                    configs=configs,
                    accounts_s=accounts_s,
                    slow_vs_fast=slow_vs_fast,
                    gil_wait_share=gil_wait_share,
                ),
                evidence_ids=list(dict.fromkeys(e.id for e in evidence_items)),
            )
        )
    return drafts
