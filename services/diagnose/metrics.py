"""A finding's numbers, typed per kind (docs/reference/findings.md says what each kind means).

A rule states its numbers as one of these models; they become the JSON a stored Finding
holds only where a draft is stored (``Metrics.stored``: services/diagnose/diagnose.py,
and change_points.py and services/jobs/pull_requests.py, which store their findings
themselves). The stored JSON keeps the keys
and values the rules wrote as plain dicts before, so the report (its schema leaves
``metrics`` open: services/jobs/report-v1.schema.json), the API, the dashboard's
templates and findings stored earlier read the same shape.

Readers of stored findings parse the JSON back through ``metrics_of``.

Units are in the names, as in the JSON: ``_s`` seconds, ``share`` a fraction (0..1 of
the named whole), ``ratio`` a slow median over a fast one.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from services.evidence import BlockingCall, CallbackTime, ImportTiming, ProfiledFunction


def _is_none(value: object) -> bool:
    return value is None


def omitted_when_none() -> Any:
    """A key the rule adds only when it applies (it wrote ``**({...} if x else {})``):
    stored without the key when there is nothing to say, as before; a reader finds None.

    Keys the rules always wrote, None or not (stall's ``frozen_s``, futex_storm's
    ``futex_share_of_run``), stay plain Optional fields and keep their null."""
    return Field(default=None, exclude_if=_is_none)


class Metrics(BaseModel):
    """What every kind's numbers share: immutable once stated; a key nobody declared is
    a typo at the rule and fails at once (tests/unit/services/diagnose/test_metrics.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def stored(self) -> dict[str, Any]:
        """The JSON a Finding stores. Non-finite floats stay floats here: the JSON columns
        write them as null (services/db.py), as they did with the plain dicts."""
        return self.model_dump(mode="json")


class StoredMetrics(Metrics):
    """A stored shape no kind's model reads: a kind without a model, a finding stored
    before its kind's current model (a key since added, renamed or retyped; a key since
    dropped is only left out: metrics_of), or a finding built by
    hand (tests store ``{"ratio": 2.0}`` alone). Its keys are kept as stored
    (``model_extra``) so nothing is lost or crashes; typed readers find none of their
    fields in it and fall back as they did when a key was missing."""

    model_config = ConfigDict(extra="allow")


# --- shared parts ----------------------------------------------------------------------


class ConfigMedian(Metrics):
    """A configuration's median with its interval (services/measure/stats.py Summary)."""

    config: str  # the configuration's label, e.g. "cpuset=0-1"
    median: float  # seconds
    ci_low: float  # seconds: the interval's lower end
    ci_high: float  # seconds
    n: int  # runs
    confidence: float  # the interval's coverage, 0..1


class PushesMedian(Metrics):
    """One side of a step in a branch's history: the median of its pushes' medians."""

    median: float  # seconds
    ci_low: float  # seconds: the 95 % interval's lower end
    ci_high: float  # seconds
    n: int  # per-push medians
    confidence: float  # 0..1
    pushes: int  # pushes on this side of the step, up to the next one


class PushRef(Metrics):
    commit: str | None  # None: a job of an uploaded archive, no commit
    job_id: int  # the push's first job


class ConfigsLoad(Metrics):
    """The median CPUs other processes kept busy during the slow and the fast
    configuration's runs (services/diagnose/neighbours.py)."""

    slow: float  # CPUs
    fast: float  # CPUs


class GroupsLoad(Metrics):
    """The same for the fast and the slow group of runs within one configuration."""

    fast: float  # CPUs
    slow: float  # CPUs


class QuotaShare(Metrics):
    """What a CPU quota alone explains of a slowdown (cpu_sensitivity's module docstring)."""

    cpus: float  # the slow configuration's quota, in CPUs
    cpu_share: float | None  # CPUs the command kept busy in the fast configuration
    expected_s: float  # the fast median stretched by the quota, plus one throttling pause


class PinnedShare(Metrics):
    """What fewer pinned CPUs alone explain of a slowdown."""

    cpus: int  # CPUs the slow configuration pins the command to
    cpu_share: float | None  # CPUs the command kept busy in the fast configuration
    expected_s: float  # the fast median stretched by the CPUs it lost


class CollectionError(Metrics):
    module: str  # the test module pytest could not collect
    exception: str  # what importing it raised


# --- one model per kind (per producer where a kind has two) ----------------------------


class BusyPollingMetrics(Metrics):
    # The polling syscalls' system time (strace -c) per run of the subject, at most the
    # untraced run: what waking up to check costs.
    accounts_s: float
    polling_calls: int  # sleep and non-blocking wait calls in the traced run
    polling_calls_per_s: float  # of the traced run's wall time
    voluntary_switches_per_s: float  # median over the timing runs (or the test's evidence run)
    cpu_share: float  # CPU time per wall second, same runs
    syscalls: dict[str, int]  # syscall name -> calls (strace -c)


class SlowerSinceMetrics(Metrics):
    branch: str
    ratio: float  # the after side's median over the before side's
    p_value: float  # the change point's
    first_slow: PushRef
    last_fast: PushRef
    before: PushesMedian
    after: PushesMedian
    found_after_job: int  # the job whose completion found the step
    method: str  # the detector, as the detail names it


class CommandFailedMetrics(Metrics):
    # No run measured anything but the failure: the median run's whole wall time.
    accounts_s: float
    configs: dict[str, int]  # configuration label -> its failing runs
    runs: int  # failing runs in all
    timed_out: int  # of them, runs that timed out
    exit_codes: dict[str, int]  # exit code (as text: a JSON key) -> runs
    exit_code: int | None  # the most common exit code; None: every run timed out
    failed_tests: list[str]
    collection_errors: list[CollectionError]
    # How it failed (command_failed.EXITED, TIMED_OUT or pytest's kinds): part of the
    # finding's fingerprint (diagnose.scope_of).
    failure: str
    output_tail: str  # the last lines of output


class CpuSensitivityMetrics(Metrics):
    ratio: float  # the slow configuration's median over the fast one's
    slower_by_s: float  # the slow median minus the fast one
    slow: ConfigMedian
    fast: ConfigMedian
    medians: dict[str, float]  # configuration label -> median, seconds
    p_value: float  # the rank test's
    fdr: float  # the false discovery rate the test is a discovery at
    family_size: int  # tests judged together (Benjamini-Hochberg's family)
    method: str
    # Only when the two configurations ran beside different amounts of other work.
    neighbour_load: ConfigsLoad | None = omitted_when_none()
    quota: QuotaShare | None = omitted_when_none()  # only against a configuration with a quota
    pinned: PinnedShare | None = omitted_when_none()  # only against one pinned to fewer CPUs


class CpuThrottlingMetrics(Metrics):
    throttled_share: float  # throttled CFS periods over all periods, 0..1
    nr_periods: int  # CFS periods over the runs (cgroup cpu.stat)
    nr_throttled: int  # of them, throttled
    median_held_s: float  # wall time per run held back by the quota
    median_throttled_s: float  # cpu.stat throttled time per run (summed over CPUs)
    median_wall_s: float
    cpu_demand: float  # CPUs the program wanted: CPU time plus throttled time per wall second
    quota_cpus: float  # the configuration's quota, in CPUs
    # What throttling costs beyond the quota's share of the work: the cause's weight.
    accounts_s: float
    # The quota's share (services/measure/useful_work.py): the CPU time that made progress,
    # the configuration that measured it, and the median run's time it explains; absent
    # where no configuration ran without a quota (accounts_s is then the time held back).
    useful_cpu_s: float | None = omitted_when_none()
    useful_config: str | None = omitted_when_none()
    expected_s: float | None = omitted_when_none()
    # CPU time the widest configuration without a quota burned beyond what its speedup
    # bought (spinning), and that speedup.
    spinning_s: float | None = omitted_when_none()
    speedup: float | None = omitted_when_none()
    method: str | None = omitted_when_none()


class EventLoopBlockedMetrics(Metrics):
    # The time callbacks held the loop in all, in the evidence run: every callback from
    # floor_s on (before the floor was measured: the slow callbacks' alone).
    blocked_s: float
    # What the mechanism takes of one run (per run of a test repeated in its evidence run).
    accounts_s: float
    slow_callbacks: int  # callbacks over the probe's stack threshold (20 ms)
    callbacks: int | None  # callbacks the loop ran; None: not counted
    blocking_calls: list[BlockingCall]  # named from the stacks of the slow callbacks
    # Only where the test's share was read from the whole command's drill.
    attributed_from: str | None = omitted_when_none()
    # The fields below only where the probe measured every callback from the floor on.
    floor_s: float | None = omitted_when_none()
    held_callbacks: int | None = omitted_when_none()  # callbacks from the floor on
    # The callbacks that held the loop most, by description (the short ones included).
    busiest_callbacks: list[CallbackTime] | None = omitted_when_none()
    # How late the probe's heartbeat fired behind these callbacks, in all, and at most
    # (the whole run's loop; None for a test's share read from a whole command's drill).
    heartbeat_lag_s: float | None = omitted_when_none()
    heartbeat_lag_max_s: float | None = omitted_when_none()
    # The blocked time the heartbeat's lateness counts (services/diagnose/event_loop_blocked.py),
    # and where it is the larger: the callbacks of a millisecond or more, their CPU time.
    heartbeat_blocked_s: float | None = omitted_when_none()
    heavy_callbacks: int | None = omitted_when_none()
    heavy_cpu_s: float | None = omitted_when_none()


class FutexStormMetrics(Metrics):
    accounts_s: float  # the wake-ups' system time per run, at most the untraced run
    futex_pct_time: float  # percent (0..100) of syscall time, as strace -c prints it
    futex_calls: int
    futex_seconds: float  # system time in futex, the traced run
    futex_share_of_run: float | None  # per run, of the untraced median, 0..1; None: no median


class GilContentionMetrics(Metrics):
    threads_waiting_for_gil: int  # most threads gdb saw waiting at once
    configs: list[str]  # configurations with evidence
    # The three below only where the GIL was sampled in both the slow and the fast
    # configuration: the waits' seconds the slowdown shows, and the comparison said.
    accounts_s: float | None = omitted_when_none()
    slow_vs_fast: str | None = omitted_when_none()
    gil_wait_share: dict[str, float] | None = omitted_when_none()  # label -> share of looks, 0..1


class HotPathProfileMetrics(Metrics):
    """hot_path from one profile: where a test's (or the command's) samples sit."""

    thread: str  # the profiled thread
    samples: int  # its samples
    functions: list[ProfiledFunction]
    cpu_share: float | None  # the command's CPU time per wall second; None: a test's


class HotPathGrowthMetrics(Metrics):
    """hot_path from two profiles: what grew from the fast configuration to the slow one."""

    functions: list[ProfiledFunction]
    # "function (file)" -> configuration label -> seconds on the stack per run
    per_run_s: dict[str, dict[str, float]]
    accounts_s: float  # the named function's growth, at most the slowdown
    slow_vs_fast: str


class LatencyFlakyModesMetrics(Metrics):
    pattern: Literal["multimodal"] = "multimodal"
    ratio: float  # the slow group's median over the fast group's (a lower bound below resolution)
    fast_runs: list[float]  # seconds
    slow_runs: list[float]  # seconds
    runs: list[float]  # seconds, in run order
    # Only when the two groups ran beside different amounts of other work.
    neighbour_load: GroupsLoad | None = omitted_when_none()


class LatencyFlakyDispersedMetrics(Metrics):
    pattern: Literal["dispersed"] = "dispersed"
    iqr_s: float  # interquartile range
    median_s: float
    runs: list[float]  # seconds, in run order


class OffCpuWaitMetrics(Metrics):
    accounts_s: float  # the wait: wall time the median run spent off the CPU
    cpu_share: float  # CPU time per wall second, 0..1 for one thread
    median_wall_s: float
    median_cpu_s: float  # user + sys
    median_voluntary_ctx_switches: int | float  # a median of counts: a half between two


class SlowStartupImportsMetrics(Metrics):
    """slow_startup of any Python command, from -X importtime."""

    accounts_s: float  # the imports' time, at most the run
    import_s: float  # top-level imports in all
    timing_median_s: float  # the fastest configuration's median run
    share: float  # import_s of that run, 0..1
    slowest: list[ImportTiming]


class SlowStartupPytestMetrics(Metrics):
    """slow_startup of pytest: the run's time outside its tests."""

    accounts_s: float
    startup_s: float  # wall time minus the JUnit durations, median run
    share: float  # of the run, 0..1
    plugins_s: float | None  # plugins' and conftest imports' time; None: no -X importtime evidence
    slowest: list[ImportTiming]


class StallMetrics(Metrics):
    accounts_s: float  # the stalled run beyond the median of the same configuration and subject
    elapsed_s: float | None  # since the process's start, when it was frozen
    stall_after_s: float | None  # the stall threshold
    wall_s: float | None
    timed_out: bool | None
    frozen_s: float | None  # how long it stayed frozen while the tools ran
    attempts: int | None


class SlowerThanBaseMetrics(Metrics):
    """slower_than_base: a pull request's test against its base commit, runs interleaved
    (services/jobs/pull_requests.py)."""

    ratio: float  # the head's median over the base's
    # The ratio's 95 % interval and the rank test's p (Change's: None only for a change
    # that did not regress, which files no finding).
    ratio_low: float | None
    ratio_high: float | None
    base_median_s: float
    head_median_s: float
    p_value: float | None
    base_commit: str | None  # the base commit's sha, as the job's source stored it


class TinyReadsTracedMetrics(Metrics):
    """tiny_reads from the reads probe (strace of every read)."""

    # The read syscalls' system time per run; only where strace -c measured it.
    accounts_s: float | None = omitted_when_none()
    fd_type: str  # socket, pipe, file, other
    reads: int  # reads that brought data
    median_bytes: float
    mode_bytes: int | None
    mean_bytes: float | None
    bytes: int  # in all
    histogram: dict[str, int]  # size bucket ("<=64", ">65536") -> reads


class TimingDisagreesMetrics(Metrics):
    """timing_disagrees: the JUnit durations a run reported against lagtrace's timer, the
    median of the configuration's runs that were judged."""

    # over: the durations add up to more than the timer allows; under: the timer saw
    # more than the test's duration and the run's CPU time explain.
    direction: Literal["over", "under"]
    reported_s: float  # the test's duration (or, over, the run's sum of durations)
    wall_s: float  # the run's wall time, as lagtrace timed it
    cpu_s: float | None  # the run's CPU time (under); None for over
    # The timer's bound: over, the most the durations can add up to (wall x workers);
    # under, the least the run can take (duration + CPU time, stretched by a quota).
    bound_s: float
    gap_s: float  # how far past the bound, seconds
    ratio: float  # reported over bound (over), wall over bound (under); > 1
    workers: int | None  # processes that ran tests at once (Run.test_workers)
    runs: list[int]  # the runs judged (Run ids)


class TinyReadsCountedMetrics(Metrics):
    """tiny_reads from the timing runs' /proc io counters."""

    read_syscalls: int | float  # median per run: a half between two counts
    bytes_per_read: float  # median per run
    median_wall_s: float


# --- reading stored findings -----------------------------------------------------------

# kind -> what its stored JSON parses as. A kind with two producers is a union the stored
# keys decide between (every model forbids the other's keys; latency_flaky names its pattern).
KINDS: dict[str, Any] = {
    "busy_polling": BusyPollingMetrics,
    "slower_since": SlowerSinceMetrics,
    "command_failed": CommandFailedMetrics,
    "cpu_sensitivity": CpuSensitivityMetrics,
    "cpu_throttling": CpuThrottlingMetrics,
    "event_loop_blocked": EventLoopBlockedMetrics,
    "futex_storm": FutexStormMetrics,
    "gil_contention": GilContentionMetrics,
    "hot_path": HotPathProfileMetrics | HotPathGrowthMetrics,
    "latency_flaky": Annotated[LatencyFlakyModesMetrics | LatencyFlakyDispersedMetrics, Field(discriminator="pattern")],
    "off_cpu_wait": OffCpuWaitMetrics,
    "slow_startup": SlowStartupImportsMetrics | SlowStartupPytestMetrics,
    "slower_than_base": SlowerThanBaseMetrics,
    "stall": StallMetrics,
    "timing_disagrees": TimingDisagreesMetrics,
    "tiny_reads": TinyReadsTracedMetrics | TinyReadsCountedMetrics,
}
_READERS: dict[str, TypeAdapter[Metrics]] = {kind: TypeAdapter(shape) for kind, shape in KINDS.items()}


def metrics_of(kind: str, stored: Any) -> Metrics:
    """A stored finding's metrics (its JSON) as its kind's model.

    Never raises: an unknown kind, or a shape its kind's model does not read (stored
    before a key was added; built by hand), comes back as StoredMetrics with the keys as
    stored, and a reader of typed fields treats it as not stating them. Keys the model
    does not state are left out of it, not refused: an older job's key that a kind has
    since dropped does not hide the numbers it still states
    (test_metrics.py::test_a_key_an_older_job_stored_is_left_out_and_the_rest_reads_typed)."""
    found = stored if isinstance(stored, dict) else {}
    reader = _READERS.get(kind)
    if reader is not None:
        try:
            return reader.validate_python(found)
        except ValidationError:
            pass
        try:
            # A key an older lagtrace stored that the kind no longer states: the keys it
            # does state still read as typed (the key is only left out of the model; the
            # stored JSON, which the report and the API serve, keeps it).
            # extra="ignore" here overrides the models' "forbid", which is for the rules.
            return reader.validate_python(found, extra="ignore")
        except ValidationError:
            pass  # a key missing or of another type: kept as stored, below
    return StoredMetrics.model_validate(found)


def _stated(metrics: Metrics, name: str) -> object:
    """A field a finding's metrics state where its kind's model declares it; a shape kept
    as stored is read by its key, as ratio_of reads it."""
    if isinstance(metrics, StoredMetrics):
        return (metrics.model_extra or {}).get(name)
    return getattr(metrics, name) if name in type(metrics).model_fields else None


def accounts_s_of(metrics: Metrics) -> float | None:
    """The seconds a cause's mechanism accounts for (services/diagnose/diagnoses.py
    choose_cause), or None where its kind states none or did not measure them."""
    value = _stated(metrics, "accounts_s")
    return float(value) if isinstance(value, int | float) else None


def slow_vs_fast_of(metrics: Metrics) -> str | None:
    """Which comparison of the slow and the fast configuration a cause's seconds came
    from, where its kind says."""
    value = _stated(metrics, "slow_vs_fast")
    return value if isinstance(value, str) else None


def ratio_of(metrics: Metrics) -> float | None:
    """The slowdown ratio a finding states, or None where its kind states none. A shape
    kept as stored is read by its ``ratio`` key as before (the inbox's ratio, services/
    diagnose/inbox.py, ranks findings stored before their kind's model existed)."""
    value = _stated(metrics, "ratio")
    try:
        return float(value) if isinstance(value, int | float | str) else None
    except (TypeError, ValueError):
        return None
