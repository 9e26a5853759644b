"""hot_path: where a slow or flagged command's (or test's) CPU time goes, by function.

DESIGN.md story 2's `iter_content(chunk_size=1)`: 4 s of CPU in Python, which quota
rules can only call "CPU-sensitive". The py-spy profile of the drill names the
functions (file:line) that hold the samples of the busiest thread, each with its own
share (running in the function itself) and its cumulative share (on the stack), and
the timing runs give the split between running on a CPU and waiting (for the GIL, for
I/O, or idle; the stall snapshot's py-spy dump tells the GIL apart when one was taken).

Only for a mostly running program: where an off-CPU program waits is the subject of
off_cpu_wait, busy_polling and event_loop_blocked. And only for a subject with a symptom
(services/diagnose/symptoms.py: slow, or a timing finding of medium severity or more):
every program that computes has functions that hold its samples, and a healthy one's
are no finding.
"""

from __future__ import annotations

import statistics

from services.diagnose.context import RuleContext, subject, where
from services.diagnose.findings import FindingDraft, Severity
from services.diagnose.symptoms import symptomatic
from services.measure.evidence import ProfiledFunction, PySpyDumpContent, PySpyRecordContent, ThreadFunctions
from services.models import Evidence

# A share this close to the whole thread is an entry point (<module>, main, the pytest
# runner), true of every program and no answer to "where".
ENTRY_POINT_PCT = 95.0
NAMED = 3
# The test runner's and the interpreter's own machinery: collection, fixtures, hooks,
# assertion rewriting, runpy, imports. Every pytest run holds samples there, a short
# test's run mostly (issue 22: a 10 ms websocket test's "cause" was pytest's
# getfixturemarker); they are never the answer to where a test's time goes.
HARNESS = (
    "/_pytest/",
    "/pluggy/",
    "/pytest/",
    "/py.py",
    "<frozen runpy>",
    "/runpy.py",
    "<frozen importlib",
    "/importlib/",
    "<frozen zipimport>",
    "/unittest/",
)


def harness(function: ProfiledFunction) -> bool:
    return any(marker in function.file for marker in HARNESS)


def check(context: RuleContext) -> list[FindingDraft]:
    limits = context.thresholds
    by_label = {config.label: config for config in context.job.configs}
    best: dict[str | None, tuple[Evidence, ThreadFunctions]] = {}
    for evidence, content in context.evidence_of(PySpyRecordContent):
        tables = content.functions or []
        run = context.run_of(evidence)
        if not tables or run is None or run.wall_s < limits.hot_path_min_wall_s or evidence.config is None:
            continue
        # The thread with the most samples not blocked in a wait: where the CPU went.
        table = max(tables, key=lambda t: t.samples * (1 - t.waiting_pct / 100))
        if evidence.test_id not in best or table.samples > best[evidence.test_id][1].samples:
            best[evidence.test_id] = (evidence, table)
    drafts = []
    # The command's CPU share where it ran freest: under a quota every program's share
    # falls by the quota's factor, which says nothing about where its time goes.
    shares = [
        statistics.median((r.user_s + r.sys_s) / r.wall_s for r in timing)
        for config in by_label.values()
        if (timing := [r for r in context.timing_runs(config) if r.wall_s and r.exit_code == 0])
    ]
    explain = symptomatic(context) if best else set()
    for test_id, (evidence, table) in best.items():
        if test_id not in explain:
            continue
        label = evidence.config.label if evidence.config else ""
        # A test's CPU share is not measured alone (the run holds the whole suite): the
        # profile's own samples stand for it.
        cpu_share = max(shares) if test_id is None and shares else None
        if cpu_share is not None and cpu_share < 0.5:
            continue
        # A function blocked in a wait (a lock, a selector) holds samples, not the CPU; one
        # that ran mostly inside imports (finding, compiling, executing modules: pytest's
        # assertion rewriting parses every test module there) is start-up, which
        # slow_startup judges against the whole run and names by import.
        functions = [
            f
            for f in table.functions
            if not f.waiting and 2 * f.importing_samples <= f.cumulative_samples and not harness(f)
        ]
        own = [f for f in functions if f.own_pct >= 100 * limits.hot_path_min_share][:NAMED]
        path = [
            f
            for f in sorted(functions, key=lambda f: -f.cumulative_pct)
            if 100 * limits.hot_path_min_share <= f.cumulative_pct < ENTRY_POINT_PCT and f not in own
        ][:NAMED]
        if not own and not path:
            continue
        # The title's share is the one the function was chosen for: its own samples, or
        # (a caller on the hot path) its cumulative ones.
        top, share, preposition = (own[0], own[0].own_pct, "in") if own else (path[0], path[0].cumulative_pct, "under")
        split = _split(context, evidence, cpu_share)
        if table.waiting_pct:
            split += f" {table.waiting_pct:.0f}% of the thread's samples were blocked in a lock, selector or wait."
        drafts.append(
            FindingDraft(
                kind="hot_path",
                severity=Severity.low,
                title=(
                    f"{subject(test_id)} spends {share:.0f}% of its samples {preposition} {top.function} "
                    f"({_short(top.file)}:{top.line})"
                ),
                detail=(
                    f"py-spy record ({where(evidence)}, {table.samples} samples of {table.thread}): "
                    + "; ".join(_describe(f) for f in own + path)
                    + f". {split} Make the hot function do less per call, or call it less often "
                    f"(for byte-at-a-time loops: larger chunks)"
                ),
                config_label=label,
                test_id=test_id,
                metrics={
                    "thread": table.thread,
                    "samples": table.samples,
                    "functions": [f.model_dump() for f in own + path],
                    "cpu_share": cpu_share,
                },
                evidence_ids=[evidence.id],
            )
        )
    return drafts


def _describe(function: ProfiledFunction) -> str:
    return (
        f"{function.function} ({function.file}:{function.line}) own {function.own_pct:.0f}%, "
        f"cumulative {function.cumulative_pct:.0f}%"
    )


def _short(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _split(context: RuleContext, evidence: Evidence, cpu_share: float | None) -> str:
    parts = []
    if cpu_share is not None:
        parts.append(
            f"Without a tracer the command ran on a CPU {cpu_share:.0%} of its wall time and waited "
            f"(for the GIL, I/O or idle) {max(0.0, 1 - cpu_share):.0%}."
        )
    dumps = [
        dump
        for e, dump in context.evidence_of(PySpyDumpContent)
        if e.test_id == evidence.test_id and e.config_id == evidence.config_id
    ]
    if dumps:
        threads = dumps[0].threads or []
        holding = sum(1 for t in threads if t.owns_gil)
        runnable = sum(1 for t in threads if t.active and not t.owns_gil)
        idle = sum(1 for t in threads if not t.active)
        parts.append(
            f"At the stall snapshot {holding} thread(s) held the GIL, {runnable} were running or waiting for it, "
            f"{idle} idle."
        )
    return " ".join(parts)
