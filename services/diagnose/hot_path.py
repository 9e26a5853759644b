"""hot_path: where a slow or flagged command's (or test's) CPU time goes, by function.

The design's story 2 (docs/explanations/design.md), `iter_content(chunk_size=1)`: 4 s of CPU in Python, which quota
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

Where the drill profiled a subject in the two configurations its symptom compares, the
answer is differential, as an expert reads two profiles side by side: the function
whose samples per repetition of the test grew the most from the fast configuration to
the slow one, in the subject's own code or its libraries (not the standard library's
event loop or threads, which run under every program), with the seconds that growth
accounts for (``accounts_s``). A 15 ms websocket test of starlette 0.37 on one core:
its portal threads' ``_asgi_receive`` polling loop, not pytest's fixture machinery.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass

from services.diagnose.context import RuleContext, subject, where
from services.diagnose.findings import FindingDraft, Severity
from services.diagnose.findings import format_seconds as _s
from services.diagnose.metrics import HotPathGrowthMetrics, HotPathProfileMetrics
from services.diagnose.symptoms import screen_findings, symptomatic
from services.evidence import ProfiledFunction, PySpyDumpContent, PySpyRecordContent, ThreadFunctions
from services.models import Evidence

NAMED = 3
# The test runner's and the interpreter's own machinery: collection, fixtures, hooks,
# assertion rewriting, runpy, imports. Every pytest run holds samples there, a short
# test's run mostly (docs/reference/findings.md: a 10 ms websocket test's "cause" was pytest's
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
    # pytest-xdist's workers: execnet's serve loop runs every test a worker holds, and its
    # bootstrap is exec'd from a string (as are dataclasses' generated methods).
    "/xdist/",
    "/execnet/",
    "<string>",
    # lagtrace's own plugins in an evidence run: the amplifier repeats the drilled test
    # (services/measure/probes/amplify.py), the census and stall clock watch it.
    "/lagtrace_amplify.py",
    "/lagtrace_census.py",
    "/lagtrace_stall_clock.py",
)


def harness(function: ProfiledFunction) -> bool:
    return in_harness(function.file)


def in_harness(path: str) -> bool:
    return any(marker in path for marker in HARNESS)


def standard_library(path: str) -> bool:
    """The interpreter's own modules (asyncio's loop, threading, queue, selectors): under
    every program; the answer to "where" is the caller that keeps them busy."""
    if path.startswith("<frozen"):
        return True
    return re.search(r"/lib/python3[0-9.]*/", path) is not None and not any(
        part in path for part in ("/site-packages/", "/dist-packages/")
    )


def check(context: RuleContext) -> list[FindingDraft]:
    limits = context.thresholds
    by_label = {config.label: config for config in context.job.configs}
    best: dict[str | None, tuple[Evidence, ThreadFunctions]] = {}
    # A regression's profiles (one configuration, two commits) are compared apart, below.
    records = [(e, c) for e, c in context.evidence_of(PySpyRecordContent) if c.side is None]
    for evidence, content in records:
        tables = content.functions or []
        run = context.run_of(evidence)
        if not tables or run is None or run.wall_s < limits.hot_path_min_wall_s or evidence.config is None:
            continue
        # The thread with the most samples not blocked in a wait: where the CPU went.
        table = max(tables, key=lambda t: t.samples * (1 - t.waiting_pct / 100))
        if evidence.test_id not in best or table.samples > best[evidence.test_id][1].samples:
            best[evidence.test_id] = (evidence, table)
    drafts = _between_commits(context)
    compared: set[str | None] = {draft.test_id for draft in drafts}
    # A slowdown between two configurations asks for the differential answer, a low one
    # too: the drill took the subject's evidence in both, and only what grew is named. (A
    # spread within one configuration, latency_flaky, compares no two configurations.)
    flagged = (
        {draft.test_id for draft in screen_findings(context) if draft.kind == "cpu_sensitivity"} if records else set()
    )
    for test_id in {evidence.test_id for evidence, _ in records} & flagged:
        draft = _differential(context, test_id, records)
        if draft is not None:
            drafts.append(draft)
            compared.add(test_id)
    # The command's CPU share where it ran freest: under a quota every program's share
    # falls by the quota's factor, which says nothing about where its time goes.
    shares = [
        statistics.median((r.user_s + r.sys_s) / r.wall_s for r in timing)
        for config in by_label.values()
        if (timing := [r for r in context.timing_runs(config) if r.wall_s and r.exit_code == 0])
    ]
    explain = symptomatic(context) if best else set()
    for test_id, (evidence, table) in best.items():
        if test_id not in explain or test_id in compared:
            continue
        label = evidence.config.label if evidence.config else ""
        # A test's CPU share is not measured alone (the run holds the whole suite): the
        # profile's own samples stand for it.
        cpu_share = max(shares) if test_id is None and shares else None
        if cpu_share is not None and cpu_share < limits.hot_path_min_cpu_share:
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
            if 100 * limits.hot_path_min_share <= f.cumulative_pct < 100 * limits.hot_path_entry_point_share
            and f not in own
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
                metrics=HotPathProfileMetrics(
                    thread=table.thread,
                    samples=table.samples,
                    functions=own + path,
                    cpu_share=cpu_share,
                ),
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


@dataclass
class _Growth:
    function: ProfiledFunction  # as the slow configuration's profile saw it
    slow_s: float  # seconds per repetition on the stack (not waiting), slow configuration
    fast_s: float

    @property
    def accounts_s(self) -> float:
        return self.slow_s - self.fast_s


def _roots(content: PySpyRecordContent, entry_point_share: float) -> set[tuple[str, str]]:
    """The functions at the root of a thread of the profile (its run(), the event loop's
    run_forever): on the stack for nearly all of the thread's samples."""
    return {
        (function.function, function.file)
        for table in content.functions or []
        for function in table.functions
        if function.cumulative_pct >= 100 * entry_point_share
    }


def _per_repetition(
    content: PySpyRecordContent, roots: set[tuple[str, str]]
) -> dict[tuple[str, str], tuple[ProfiledFunction, float]]:
    """Each function's seconds on the stack (not waiting, not importing) per repetition of
    the subject, summed over the threads: amplified evidence runs repeat a short test, and
    the two configurations' runs repeat it a different number of times.

    At most one repetition's duration in that run: every thread is sampled at the same
    instants, so two threads inside one function at once (an echo server's handler and
    its client, a pool's workers) count the same wall-clock second once per thread, and the
    sum claimed more seconds than the test took ("2.896 s more per run in _echo" for a test
    1.82 s slower). No function was on the stack longer than the test ran."""
    rate = content.rate_hz or 100
    repetitions = content.run.iterations if content.run else 1
    ran_s = content.run.observed_s if content.run and content.run.observed_s > 0 else None
    found: dict[tuple[str, str], tuple[ProfiledFunction, float]] = {}
    for table in content.functions or []:
        for function in table.functions:
            if function.waiting or harness(function) or 2 * function.importing_samples > function.cumulative_samples:
                continue
            key = (function.function, function.file)
            if key in roots:
                continue
            # Less what it spent under a blocking wait: a thread asleep in Queue.get holds
            # its callers on the stack without running them.
            running = function.cumulative_samples - function.importing_samples - function.waiting_samples
            seconds = max(0, running) / rate / max(1, repetitions)
            earlier = found.get(key)
            found[key] = (earlier[0] if earlier else function, (earlier[1] if earlier else 0.0) + seconds)
    if ran_s is not None:
        found = {key: (function, min(seconds, ran_s)) for key, (function, seconds) in found.items()}
    return found


def _key(function: ProfiledFunction) -> tuple[str, str]:
    return (function.function, function.file)


def _callers(content: PySpyRecordContent) -> dict[tuple[str, str], set[tuple[str, str]]]:
    """Each listed function's callers as the profile recorded them, over its threads."""
    found: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for table in content.functions or []:
        for function in table.functions:
            if function.caller is not None:
                found.setdefault(_key(function), set()).add((function.caller.function, function.caller.file))
    return found


def _above(function: ProfiledFunction, callers: dict[tuple[str, str], set[tuple[str, str]]]) -> set[tuple[str, str]]:
    """The functions above this one on its recorded call paths."""
    seen: set[tuple[str, str]] = set()
    frontier = set(callers.get(_key(function), ()))
    while frontier:
        key = frontier.pop()
        if key not in seen:
            seen.add(key)
            frontier |= callers.get(key, set()) - seen
    return seen


def _own_share(function: ProfiledFunction) -> float:
    """Of a function's samples in its thread, those at the top of the stack: an inner
    function runs its own code more of the time than the frames that call it."""
    return function.own_samples / function.cumulative_samples if function.cumulative_samples else 0.0


def _called_from(function: ProfiledFunction) -> str:
    """ ", called from X (file:line)" where another module's code calls it: a library's
    primitive (a sleep, a lock, a queue) that grew is spent where the caller loops on it."""
    caller = function.caller
    if caller is None or caller.file == function.file or standard_library(caller.file) or in_harness(caller.file):
        return ""
    return f", called from {caller.function} ({_short(caller.file)}:{caller.line})"


def _differential(
    context: RuleContext, test_id: str | None, records: list[tuple[Evidence, PySpyRecordContent]]
) -> FindingDraft | None:
    """The function whose time grew the most from the fast configuration's profile to the
    slow one's, where the drill profiled the subject in both (module docstring)."""
    if test_id is None:
        return None  # a whole program's profile is not repeated: no per-repetition growth
    pair = context.drill_pair(test_id)
    if pair is None:
        return None
    profiles = {e.config.label: (e, c) for e, c in records if e.test_id == test_id and e.config is not None}
    if pair.slow not in profiles or pair.fast not in profiles:
        return None
    slow_median = context.timing_median(pair.slow, test_id)
    fast_median = context.timing_median(pair.fast, test_id)
    if slow_median is None or fast_median is None or slow_median <= fast_median:
        return None
    slowdown = slow_median - fast_median
    found = _growth(context, profiles[pair.slow][1], profiles[pair.fast][1], slowdown)
    if found is None:
        return None
    top, named = found
    # A profile is taken under the tracer, in runs slower than the timing runs' median:
    # what it shows is never claimed beyond the slowdown the timing runs measured.
    accounts = min(top.accounts_s, slowdown)
    versus = f"{pair.slow} against {pair.fast}"
    return FindingDraft(
        kind="hot_path",
        severity=Severity.low,
        title=(
            f"{subject(test_id)} spends {_s(accounts)} more per run in {top.function.function} "
            f"({_short(top.function.file)}:{top.function.line}){_called_from(top.function)} "
            f"with {pair.slow} than with {pair.fast}"
        ),
        detail=(
            f"py-spy record of the test in both configurations ({versus}), per run of the test, "
            "on the stack and not waiting, summed over threads (at most the test's own duration): "
            + _listed(named)
            + f". The test is {_s(slowdown)} slower with {pair.slow} ({_s(slow_median)} vs {_s(fast_median)} "
            "median): what grew is where the slowdown goes. Make the function wait on an event instead of "
            "looping, do less per call, or call it less often"
        ),
        config_label=pair.slow,
        test_id=test_id,
        metrics=_growth_metrics(named, top, accounts, pair.slow, pair.fast),
        evidence_ids=[profiles[pair.slow][0].id, profiles[pair.fast][0].id],
    )


def _between_commits(context: RuleContext) -> list[FindingDraft]:
    """A regressed test profiled in one configuration on the pull request's head and on its
    base commit (services/measure/drill.py profile_commits): the frames whose time grew
    from the base to the head, with the seconds, as the differential between two
    configurations names them. The slowdown is the profiled runs' own (per run of the
    test, head less base): no timing run of the base is stored in the same configuration
    for a gate, which judges against history."""
    sides: dict[str, dict[str, tuple[Evidence, PySpyRecordContent]]] = {}
    for evidence, content in context.evidence_of(PySpyRecordContent):
        if content.side is not None and evidence.test_id is not None and evidence.config is not None:
            sides.setdefault(evidence.test_id, {})[content.side] = (evidence, content)
    drafts = []
    for test_id, found in sides.items():
        if "head" not in found or "base" not in found:
            continue
        (head_evidence, head), (base_evidence, base) = found["head"], found["base"]
        if head.run is None or base.run is None or head_evidence.config is None:
            continue
        slowdown = head.run.observed_s - base.run.observed_s
        if slowdown <= 0:
            continue  # under the profiler the head was no slower: nothing to account for
        grown = _growth(context, head, base, slowdown)
        if grown is None:
            continue
        top, named = grown
        accounts = min(top.accounts_s, slowdown)
        label = head_evidence.config.label
        drafts.append(
            FindingDraft(
                kind="hot_path",
                severity=Severity.low,
                title=(
                    f"{subject(test_id)} spends {_s(accounts)} more per run in {top.function.function} "
                    f"({_short(top.function.file)}:{top.function.line}){_called_from(top.function)} "
                    f"on this commit than on the base commit, with {label}"
                ),
                detail=(
                    f"py-spy record of the test with {label} on the head and on the base commit, per run of the "
                    "test, on the stack and not waiting, summed over threads (at most the test's own duration): "
                    + _listed(named)
                    + f". Under the profiler the test took {_s(head.run.observed_s)} per run on the head and "
                    f"{_s(base.run.observed_s)} on the base: what grew is where the regression goes"
                ),
                config_label=label,
                test_id=test_id,
                metrics=_growth_metrics(named, top, accounts, "head", "base commit"),
                evidence_ids=[head_evidence.id, base_evidence.id],
            )
        )
    return drafts


def _growth(
    context: RuleContext, slow_content: PySpyRecordContent, fast_content: PySpyRecordContent, slowdown: float
) -> tuple[_Growth, list[_Growth]] | None:
    """What grew from the fast profile to the slow one: the function named, and those
    listed with it (the named first)."""
    entry = context.thresholds.hot_path_entry_point_share
    # A thread's root in either profile is one in both: a portal thread's run() held 93 %
    # of its samples on one core and 100 % on two, and its whole thread read as growth
    # (test_hot_path.py::test_a_threads_root_in_either_profile_is_never_what_grew).
    roots = _roots(slow_content, entry) | _roots(fast_content, entry)
    slow, fast = _per_repetition(slow_content, roots), _per_repetition(fast_content, roots)
    grown = [
        _Growth(function, seconds, fast.get(key, (function, 0.0))[1])
        for key, (function, seconds) in slow.items()
        if not standard_library(function.file)
    ]
    limits = context.thresholds
    grown = [g for g in grown if g.accounts_s >= limits.hot_path_min_share * slowdown]
    if not grown:
        return None
    most = max(g.accounts_s for g in grown)
    # Callers on the same path grow as much as their callee: among those that hold nearly
    # the largest growth, name the innermost: the most of its own samples at the top of
    # the stack, then the fewest seconds on it in the slow run. Not by the seconds alone:
    # each thread's profile lists its leading functions only, so an outer frame missing
    # from one thread's list sums fewer seconds than the callee it runs (an anyio task's
    # _run_coro 7.9 ms against the sleep it loops on, 9.8 ms).
    # "Nearly" is wide: a profile of a few hundred samples moves a function's growth by a
    # fifth between runs (docs/measurements/accuracy.md, 26 Nov: a starlette route's frame 9.8 ms, the anyio sleep it
    # loops on 7.7 ms, then the other way round).
    near = [g for g in grown if g.accounts_s >= limits.hot_path_nearly_the_most * most]
    # A frame that calls another of them (through the callers the profile recorded) is
    # never the innermost, whatever its own samples: a starlette websocket route's frame
    # held more of its samples at the top of the stack than the `_asgi_receive` loop it
    # awaits, in a profile of 200 samples a thread.
    callers = _callers(slow_content)
    inner = [g for g in near if not any(h is not g and _key(g.function) in _above(h.function, callers) for h in near)]
    top = max(inner or near, key=lambda g: (_own_share(g.function), -g.slow_s))
    named = [top, *[g for g in sorted(grown, key=lambda g: -g.accounts_s) if g is not top][: NAMED - 1]]
    return top, named


def _listed(named: list[_Growth]) -> str:
    return "; ".join(
        f"{g.function.function} ({g.function.file}:{g.function.line}) {_s(g.slow_s)} vs {_s(g.fast_s)}" for g in named
    )


def _growth_metrics(named: list[_Growth], top: _Growth, accounts: float, slow: str, fast: str) -> HotPathGrowthMetrics:
    return HotPathGrowthMetrics(
        functions=[g.function for g in named],
        per_run_s={
            f"{g.function.function} ({_short(g.function.file)})": {slow: g.slow_s, fast: g.fast_s} for g in named
        },
        accounts_s=round(accounts, 6),
        slow_vs_fast=(
            f"in {slow} {top.function.function} was on the stack {_s(top.slow_s)} per run; in {fast}, {_s(top.fast_s)}"
        ),
    )
