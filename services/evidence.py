"""What each kind of evidence holds: one model per kind, shared by probes, rules, the
report, the API and the dashboard.

A probe builds its content with the model of its kind, so a misspelt key fails where
it is written instead of reading as "absent" in a rule three modules away. The
database keeps the content as JSON (``dump``); readers get the model back with
``parse``. Every model allows the same envelope: ``status`` (and ``reason`` when it is
not ok), the probe that produced it, and the evidence run's timing beside the screen's
(``run``), which is how a tracer's effect on timing is told.
"""

from __future__ import annotations

import enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class EvidenceKind(enum.StrEnum):
    strace = "strace"
    pyspy = "pyspy"  # py-spy record: flame graph and per-thread summary
    pyspy_dump = "pyspy_dump"  # py-spy dump at the stall: every thread's state and stack
    gdb = "gdb"  # a core taken at the stall, read by gdb py-bt (pystack as fallback)
    stall = "stall"  # the stall trigger itself: when it fired and what it took
    proc_io = "proc_io"
    faulthandler = "faulthandler"
    imports = "imports"
    reads = "reads"  # every read syscall's size, by descriptor type (strace)
    asyncio_loop = "asyncio_loop"  # asyncio callbacks that blocked the event loop
    census = "census"  # a whole suite's sleeps and reads, attributed to its tests
    confirm = "confirm"  # a diagnosed cause's knob turned: the test with and without it


class EvidenceStatus(enum.StrEnum):
    """Lets the report and the rules tell "nothing to see" from "could not look"."""

    ok = "ok"
    unavailable = "unavailable"  # the tool is missing, or lacks what it needs (py-bt)
    denied = "denied"  # ptrace (or reading /proc) not permitted
    failed = "failed"  # the tool ran and failed for another reason
    no_stall = "no_stall"  # the run ended before the stall threshold: nothing to snapshot
    ended = "ended"  # the process exited while the tool was attaching to it


class _Model(BaseModel):
    # forbid: a key nobody declared is a bug at the writer; validate_assignment: probes
    # fill some fields after construction (the drill adds the probe and run timing).
    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_enum_values=False)


class EvidenceRunTiming(_Model):
    """The evidence run's wall time beside the timing runs' median: the observer effect."""

    run_id: int
    wall_s: float
    # A narrowed pytest run: the test's own duration from the JUnit file; else wall_s.
    observed_s: float
    timing_median_s: float | None = None
    ratio: float | None = None
    exit_code: int
    timed_out: bool
    # A short test run this many times in the evidence run (services/measure/probes/
    # amplify.py): its counts cover every repetition.
    iterations: int = 1


class EvidenceContent(_Model):
    status: EvidenceStatus = EvidenceStatus.ok
    reason: str | None = None  # why the probe could not look (status other than ok)
    probe: str | None = None  # the --evidence probe whose run produced it
    run: EvidenceRunTiming | None = None

    @property
    def ok(self) -> bool:
        return self.status is EvidenceStatus.ok


# --- strace -f -c -------------------------------------------------------------------


class SyscallRow(_Model):
    name: str
    pct_time: float
    seconds: float
    usecs_per_call: int | float
    calls: int
    errors: int


class StraceContent(EvidenceContent):
    syscalls: list[SyscallRow] | None = None
    total: SyscallRow | None = None
    top: str | None = None
    top_pct_time: float | None = None
    timed_out: bool | None = None
    # True: strace was stopped before the hard timeout; the table covers the run up to then.
    stopped_before_timeout: bool | None = None


# --- py-spy record ------------------------------------------------------------------


class TopFrame(_Model):
    frame: str
    samples: int
    pct: float


class ProfiledThread(_Model):
    name: str
    samples: int
    top_frames: list[TopFrame]


class PythonFrame(_Model):
    function: str
    file: str
    line: int | None = None


class ProfiledFunction(_Model):
    """A function's share of one thread's samples: own (innermost frame) and cumulative
    (anywhere on the stack); ``line`` is where most of its own samples were."""

    function: str
    file: str
    line: int | None = None
    own_samples: int
    cumulative_samples: int
    own_pct: float
    cumulative_pct: float
    # Of its cumulative samples, those taken while a module was being imported: start-up
    # (slow_startup's subject), not the program at work.
    importing_samples: int = 0
    waiting: bool = False  # a known blocking wait (a lock, a selector): samples, not CPU
    # Of its cumulative samples, those whose innermost frame was such a wait: a caller
    # of Queue.get is on the stack while its thread sleeps, which is no CPU of its own.
    # Stored only where there were any, as profiles recorded before it were.
    waiting_samples: int = Field(default=0, exclude_if=lambda samples: samples == 0)
    # The frame that calls it most often (where it was innermost-but-one on the stack).
    caller: PythonFrame | None = None


class ThreadFunctions(_Model):
    thread: str
    samples: int
    waiting_pct: float = 0.0  # samples whose innermost frame is a blocking wait
    functions: list[ProfiledFunction]


class PySpyRecordContent(EvidenceContent):
    rate_hz: int | None = None
    idle_included: bool | None = None  # idle (waiting) samples are in the graph
    gil_only: bool | None = None  # samples restricted to the GIL holder (--gil)
    samples: int | None = None
    threads: list[ProfiledThread] | None = None
    # The busiest threads' functions (hot_path reads these).
    functions: list[ThreadFunctions] | None = None
    # Some sampled stack was inside an asyncio event loop's iteration (the drill runs the
    # asyncio_loop probe only where one ran); None: profiles stored before this was read.
    event_loop: bool | None = None
    timed_out: bool | None = None
    stopped_before_timeout: bool | None = None
    # A regression's profile: "head" (the pull request's head) or "base" (its base commit),
    # in the configuration that showed it (services/measure/drill.py profile_commits);
    # None: the drill's, of one commit in two configurations.
    side: str | None = Field(default=None, exclude_if=lambda side: side is None)


# --- stacks at the stall ------------------------------------------------------------


class DumpedThread(_Model):
    """A thread as py-spy dump saw it. In the stall snapshot the process is frozen, so
    the state is the kernel's: running (user code), waiting (futex) or "syscall N", with
    +gil for the GIL holder; elsewhere py-spy's own words (idle, active, active+gil)."""

    id: int | None = None
    name: str | None = None
    state: str
    active: bool
    owns_gil: bool
    frames: list[PythonFrame]


class PySpyDumpContent(EvidenceContent):
    pid: int | None = None
    program: str | None = None  # the process's executable name (python3.11, ...)
    gil_holder: str | int | None = None  # the thread holding the GIL: its name, or id
    threads: list[DumpedThread] | None = None
    duration_s: float | None = None
    phase: str | None = None  # "stall" or "last" (just before the hard timeout)
    elapsed_s: float | None = None


class CoreThread(_Model):
    """A thread of the core as gdb (info threads, py-bt, bt) and pystack read it."""

    id: int
    lwp: int
    name: str | None = None
    current: bool = False
    waiting_for_gil: bool = False
    holds_gil: bool | None = None
    frames: list[PythonFrame]
    native_frames: list[str] = []
    frames_note: str | None = None


class GdbContent(EvidenceContent):
    pid: int | None = None
    program: str | None = None
    gdb_s: float | None = None  # how long gdb took to read the core
    analysis_s: float | None = None
    executable: str | None = None
    elapsed_s: float | None = None
    gdb: str | None = None  # why gdb could not read the core
    reader: str | None = None  # "gdb" (py-bt) or "gdb+pystack"
    py_bt: str | None = None  # why py-bt was not available
    threads: list[CoreThread] | None = None
    waiting_for_gil: int | None = None  # how many threads
    timings: dict[str, float] | None = None


class StalledProcess(_Model):
    """A process of the command's tree when it was frozen (wrappers included)."""

    pid: int
    program: str
    python: bool
    snapshotted: bool


class StallAttempt(_Model):
    """An earlier evidence run that ended before its stall deadline."""

    stall_after_s: float
    observed_s: float


class GilSampledProcess(_Model):
    """One process's threads looked at repeatedly just before the stall deadline."""

    pid: int
    samples: int  # looks that found the process
    with_waiter: int  # looks in which at least one thread waited for the GIL
    threads: dict[str, int] = {}  # thread id -> looks in which it waited for the GIL
    gil_found: bool = True  # the interpreter's _PyRuntime was found (else no wait can be told)


class GilSamples(_Model):
    """Which threads waited for the GIL, from the futex each blocked thread sleeps on
    (an address inside the interpreter's _PyRuntime is the GIL): no debug symbols needed."""

    started_s: float | None = None
    window_s: float | None = None
    test: str | None = None
    processes: list[GilSampledProcess] = []
    # No attempt reached the stall deadline: the looks of the attempt that ran slowest.
    attempt: int | None = None

    @property
    def samples(self) -> int:
        return max((p.samples for p in self.processes), default=0)

    @property
    def with_waiter(self) -> int:
        return max((p.with_waiter for p in self.processes), default=0)

    @property
    def share(self) -> float:
        best = max(self.processes, key=lambda p: p.with_waiter, default=None)
        return best.with_waiter / best.samples if best is not None and best.samples else 0.0


class StallContent(EvidenceContent):
    stall_after_s: float | None = None
    # "test": the deadline counted from a pytest test's start; "process": from the start.
    clock: str | None = None
    wall_s: float | None = None
    elapsed_s: float | None = None  # since the process's start, when it was frozen
    test: str | None = None  # the pytest node id whose clock fired
    test_started_s: float | None = None
    test_elapsed_s: float | None = None
    timed_out: bool | None = None
    phases: list[str] | None = None
    timings: dict[str, float] | None = None
    freeze_delay_s: float | None = None  # from the deadline to the SIGSTOP of the group
    frozen_s: float | None = None  # how long it stayed frozen while the tools ran
    processes: list[StalledProcess] | None = None
    captured: list[str] | None = None  # what the snapshot holds, in a user's words
    not_captured: list[str] | None = None  # and what it lacks, with why
    attempts: int | None = None
    earlier_attempts: list[StallAttempt] | None = None
    crash_signal: str | None = None  # the run crashed (SIGSEGV, ...): stacks taken at the crash
    gil_samples: GilSamples | None = None
    # Taken in the fast configuration of a comparison, early on purpose: not a stall.
    comparison: bool | None = None


class ProcIoContent(EvidenceContent):
    pid: int | None = None
    program: str | None = None
    phase: str | None = None
    elapsed_s: float | None = None
    counters: dict[str, int] | None = None
    bytes_per_read_syscall: float | None = None
    bytes_per_write_syscall: float | None = None


class TracebackThread(_Model):
    id: str
    current: bool
    frames: list[PythonFrame]


class FaulthandlerContent(EvidenceContent):
    pid: int | None = None
    trigger: str | None = None  # "stall", or "crash" (faulthandler also writes on SIGSEGV...)
    stall_after_s: float | None = None
    threads: list[TracebackThread] | None = None


# --- -X importtime ------------------------------------------------------------------


class ImportTiming(_Model):
    module: str
    cumulative_s: float
    self_s: float


class ImportsContent(EvidenceContent):
    total_import_s: float | None = None
    slowest: list[ImportTiming] | None = None
    wall_s: float | None = None


# --- every read syscall (strace -e trace=read,recv...) -------------------------------


class FdTypeReads(_Model):
    """The reads from one type of descriptor (socket, pipe, file, other)."""

    calls: int
    syscalls: dict[str, int]
    reads_with_data: int
    bytes: int
    errors: int
    eof: int
    median_bytes: float | None = None
    mode_bytes: int | None = None
    mean_bytes: float | None = None
    histogram: dict[str, int]  # size bucket ("<=64", ">65536") -> reads


class ReadsContent(EvidenceContent):
    by_fd_type: dict[str, FdTypeReads] | None = None
    wall_s: float | None = None
    timed_out: bool | None = None
    stopped_before_timeout: bool | None = None


# --- asyncio callbacks that blocked the loop ----------------------------------------


class BlockingCall(_Model):
    """Slow callbacks grouped by the innermost frame the loop thread was stuck in."""

    call: str
    count: int
    total_s: float
    max_s: float
    callback: str | None = None  # the task or callback that made the call
    stack: list[str] = []  # the loop thread's stack while blocked, innermost first


class TaskBlocking(_Model):
    """Slow callbacks grouped by the task (or callback) that ran them: which test's
    coroutine blocked the loop, when a whole suite was drilled."""

    callback: str  # "Task test_x (/path/test_mod.py:12)": the coroutine, the task's own name left out
    count: int
    total_s: float
    # The functions on the loop thread's stacks while blocked, "function (file)", innermost first.
    functions: list[str] = []


class DurationBucket(_Model):
    """Callbacks (or heartbeat lags) up to ``upper_s`` and over the bucket below's."""

    # None: the last bucket, everything longer (and left out of the stored JSON: dump)
    upper_s: float | None = None
    count: int
    total_s: float


class CallbackTime(_Model):
    """The callbacks of one description that each held the loop from the floor on."""

    callback: str  # "Task handle (/path/app.py:12)": a task's own name left out
    count: int
    total_s: float
    max_s: float
    # The heartbeat's lag from the floor on when this was the longest callback since the
    # beat before: the delay it made every other coroutine wait.
    lag_s: float = 0.0


class HeartbeatLag(_Model):
    """A timer the probe schedules on each loop every ``period_s``: how late it fired is
    the loop's lag as any coroutine sleeping on it experiences it."""

    period_s: float
    beats: int
    lag_total_s: float
    lag_max_s: float
    late_beats: int  # beats that fired at least the floor late
    lags: list[DurationBucket] = []


class HeavyCallbacks(_Model):
    """The callbacks that ran ``from_s`` or longer: what the loop's own work cost, told
    from waiting (a callback that waited for the GIL grows as long, computing nothing)."""

    from_s: float
    count: int
    total_s: float
    cpu_s: float


class AsyncioLoopContent(EvidenceContent):
    threshold_s: float | None = None  # from here a callback's stack is taken (slow_callbacks)
    wall_s: float | None = None
    processes: int | None = None
    callbacks: int | None = None
    slow_callbacks: int | None = None
    blocked_s: float | None = None  # the slow callbacks' time in all
    blocking_calls: list[BlockingCall] | None = None
    tasks: list[TaskBlocking] | None = None  # None: recorded before tasks were told apart
    # The loop's blocked time in all: every callback from the floor on (the slow ones
    # included), by description, and every callback's duration by bucket. None: recorded
    # when only the slow callbacks were kept.
    floor_s: float | None = None
    held_callbacks: int | None = None
    held_s: float | None = None
    callers: list[CallbackTime] | None = None
    durations: list[DurationBucket] | None = None
    heartbeat: HeartbeatLag | None = None
    # The callbacks from a millisecond on, the floor's short ones included, and the loop
    # thread's CPU time in them. None: recorded before they were counted.
    heavy: HeavyCallbacks | None = None


# --- the census: a suite's sleeps and reads, per test ------------------------------


class CensusReads(_Model):
    reads: int  # reads that brought data
    median_bytes: float


class CensusTest(_Model):
    sleeps: int = 0
    reads: dict[str, CensusReads] = {}  # descriptor type (socket, pipe, file) -> its reads
    # What the test cost in the process that ran it, counted by the census's plugin
    # (setup, call and teardown, as pytest's own duration): work (CPU time) against
    # waiting, and its context switches. None: a census taken before they were counted.
    wall_s: float | None = None
    cpu_s: float | None = None
    voluntary_switches: int | None = None
    involuntary_switches: int | None = None
    # The time asyncio callbacks held an event loop, each from the floor on
    # (Thresholds.event_loop_blocked_floor_s), as the asyncio_loop probe counts it; None:
    # no callback reached the floor (or none ran).
    loop_blocked_s: float | None = None
    loop_held: int | None = None
    loop_longest_s: float | None = None


class CensusContent(EvidenceContent):
    # Every test the plugin counted; a census taken before it counted: those that slept or read.
    tests: dict[str, CensusTest] | None = None
    tests_seen: int | None = None
    # What one traced call cost the run (the plugin times its own lseeks): the tracer's
    # share of a test's traced duration is its calls times this.
    traced_call_s: float | None = None
    # The least callback a test's loop_blocked_s counts (Thresholds.event_loop_blocked_floor_s).
    loop_floor_s: float | None = None
    wall_s: float | None = None
    timed_out: bool | None = None
    stopped_before_timeout: bool | None = None
    # The tests it sends to the drill (polling, tiny reads, a blocked event loop): a
    # shard's census is read by the finish step on another worker.
    suspects: list[str] | None = None


# --- confirm: a cause's knob turned (services/measure/confirm.py) ----------------------


class ConfirmContent(EvidenceContent):
    cause: str  # the diagnosed cause's kind
    # Its subject: the test (None: the whole command). A diagnosis reads the experiment on
    # its test, cause and configuration: the rules run again after it, and their findings
    # are new rows.
    test: str | None = None
    knob: str  # what was turned, as a user would set it ("OPENBLAS_NUM_THREADS=1 ...")
    says: str  # the same in words
    config: str  # where: the cause's slow configuration
    # "confirmed" (faster with the knob, decided), "not confirmed" (decided: no faster),
    # "undecided" (no decision within the pairs or the budget), "failed" (a run failed).
    verdict: str
    with_s: list[float] = []  # the test's (or command's) time in each run, in run order
    without_s: list[float] = []
    ratio: float | None = None  # with over without (Hodges-Lehmann)
    ratio_low: float | None = None
    ratio_high: float | None = None
    p_faster: float | None = None  # the sequential p-value of "faster with the knob"
    # What the experiment cost: its runs and their wall time, the command's start-up included.
    runs: int | None = None
    runs_s: float | None = None


CONTENT: dict[EvidenceKind, type[EvidenceContent]] = {
    EvidenceKind.strace: StraceContent,
    EvidenceKind.pyspy: PySpyRecordContent,
    EvidenceKind.pyspy_dump: PySpyDumpContent,
    EvidenceKind.gdb: GdbContent,
    EvidenceKind.stall: StallContent,
    EvidenceKind.proc_io: ProcIoContent,
    EvidenceKind.faulthandler: FaulthandlerContent,
    EvidenceKind.imports: ImportsContent,
    EvidenceKind.reads: ReadsContent,
    EvidenceKind.asyncio_loop: AsyncioLoopContent,
    EvidenceKind.census: CensusContent,
    EvidenceKind.confirm: ConfirmContent,
}


def content_model(kind: EvidenceKind | str) -> type[EvidenceContent]:
    return CONTENT[EvidenceKind(kind)]


def parse(kind: EvidenceKind | str, content: dict[str, Any]) -> EvidenceContent:
    """The stored JSON of one evidence entry as its kind's model."""
    return content_model(kind).model_validate(content)


def dump(content: EvidenceContent) -> dict[str, Any]:
    """What the database and the report keep: JSON types, unset optional fields left out."""
    return content.model_dump(mode="json", exclude_none=True)
