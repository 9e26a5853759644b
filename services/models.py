"""SQLAlchemy 2.x models. Alembic (migrations/) is the only way the schema is created."""

from __future__ import annotations

import datetime as dt
import enum
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    func,
    select,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship

from services import evidence as evidence_model
from services.evidence import EvidenceContent


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def database_now(session: Session) -> dt.datetime:
    """Now on the database server's clock. Leases, their expiry and the workers' heartbeats
    are written and compared on it, so workers whose hosts' clocks disagree still agree on
    when a lease ends (tests/chaos/test_clock.py). PostgreSQL's clock_timestamp() is the
    time of the call, not of the transaction's start:
    https://www.postgresql.org/docs/current/functions-datetime.html#FUNCTIONS-DATETIME-CURRENT
    SQLite is one file on one machine, read by processes that share this clock."""
    if session.get_bind().dialect.name == "postgresql":
        now = session.scalar(select(func.clock_timestamp()))
        if now is not None:
            return now
    return utcnow()


class Base(DeclarativeBase):
    # Named constraints keep Alembic migrations portable between SQLite and Postgres.
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(column_0_label)s",
            "uq": "uq_%(table_name)s_%(column_0_name)s",
            "ck": "ck_%(table_name)s_%(constraint_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )
    type_annotation_map: ClassVar = {dict[str, Any]: JSON, list[Any]: JSON, dt.datetime: DateTime(timezone=True)}


class JobStatus(str, enum.Enum):
    queued = "queued"
    running = "running"
    done = "done"
    failed = "failed"
    cancelled = "cancelled"


class RunKind(str, enum.Enum):
    timing = "timing"
    evidence = "evidence"
    # The first run of each configuration: stored for the record, never in a statistic
    # (cold page cache, first import compiles .pyc files).
    warmup = "warmup"
    # A pull request's base commit, screened interleaved with the head (its timing runs
    # and its warm-up): compared with the head, never in the head's own statistics.
    base = "base"
    base_warmup = "base_warmup"
    # A pytest suite of real size (services/measure/survey.py): its first round, one
    # whole-suite run per configuration, is the survey. Its wall time and counters are the
    # command's record; its test durations only choose what the focused screen reruns.
    survey = "survey"
    # The focused screen: the suite narrowed to the tests the survey could not clear, all
    # of them in one pytest process per run. Its test durations are timings; its wall time
    # is a narrowed command's, never the command's.
    focus = "focus"
    # A pull request's base commit, narrowed to the same tests as the head's focused screen.
    base_focus = "base_focus"
    # A timed run that a busy neighbour disturbed (Thresholds.retake_foreign_cpus): kept on
    # record, never in a statistic, and taken again (services/measure/screen.py).
    disturbed = "disturbed"
    # A gate's runs (services/jobs/gate.py): the suite once in the gate configuration, then
    # the tests outside their history, narrowed. Compared with the history: never a
    # statistic of the matrix's rules. The suite's one run (repetition 0) joins the
    # history; the later looks never do (services/jobs/history.py stored_runs).
    gate = "gate"
    # A gate's run of a fixed loop that is no project's code (services/jobs/gate.py
    # CALIBRATION): the node's own speed, compared with the same loop's runs in the jobs
    # of the gate's history.
    calibration = "calibration"
    # A bisect's runs (services/jobs/bisect_step.py): one test narrowed at the commits the
    # search picks, each run with its commit (commit_sha). Runs of many commits in one
    # configuration: never a statistic of the job's configuration or of any history.
    bisect = "bisect"


# The runs whose wall time and counters time the whole command.
COMMAND_KINDS = (RunKind.timing, RunKind.survey)
# The runs whose test durations enter a test's statistics.
TEST_TIMING_KINDS = (RunKind.timing, RunKind.focus)
# The runs whose test durations a test's history keeps (one per configuration and job
# at least, whatever the survey cleared).
TEST_HISTORY_KINDS = (RunKind.timing, RunKind.focus, RunKind.survey)


class JobKind(str, enum.Enum):
    # Every configuration surveyed, focused and drilled: the reference the gates read.
    matrix = "matrix"
    # One run of the head's suite in one configuration, each test compared with its
    # stored history; only what moved goes on (services/measure/sequential.py).
    gate = "gate"
    # The commit that changed one test's time, searched between a good and a bad commit
    # (services/jobs/bisect.py; docs/explanations/bisect.md): its request and result are
    # its Bisect row.
    bisect = "bisect"


class TriageStatus(str, enum.Enum):
    new = "new"
    acknowledged = "acknowledged"
    muted = "muted"
    fixed = "fixed"


def _enum(cls: type[enum.Enum]) -> Enum:
    # Stored as plain strings (no native Postgres enum type): adding a value is then a
    # code change, not a migration that locks the table.
    return Enum(cls, native_enum=False, length=32, values_callable=lambda e: [m.value for m in e])


class Project(Base):
    __tablename__ = "projects"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    # The GitHub repository (owner/name) registered for this project: only its deliveries
    # start jobs here, cloned from repository_url (never from a URL in the payload), and
    # signed with webhook_secret (None: the server's LAGTRACE_GITHUB_WEBHOOK_SECRET).
    github_repository: Mapped[str | None] = mapped_column(String(255), unique=True)
    repository_url: Mapped[str | None] = mapped_column(Text)
    webhook_secret: Mapped[str | None] = mapped_column(String(255))
    # Pull requests from forks run only when allowed, and then with the base branch's config.
    allow_fork_pull_requests: Mapped[bool] = mapped_column(default=False)
    # Runner images a job of this project may name besides the server's default.
    allowed_images: Mapped[list[Any]] = mapped_column(default=list)

    jobs: Mapped[list[Job]] = relationship(back_populates="project")


class Job(Base):
    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    status: Mapped[JobStatus] = mapped_column(_enum(JobStatus), default=JobStatus.queued, index=True)
    source: Mapped[str] = mapped_column(String(32), default="cli")
    kind: Mapped[JobKind] = mapped_column(_enum(JobKind), default=JobKind.matrix, server_default=JobKind.matrix.value)
    # What started it: push, pull_request, api, dashboard, rerun, confirm, schedule or cli
    # (None: before 0010).
    trigger: Mapped[str | None] = mapped_column(String(32))
    command: Mapped[list[Any]] = mapped_column()
    executor: Mapped[str] = mapped_column(String(32))
    workdir: Mapped[str | None] = mapped_column(Text)
    repeat: Mapped[int] = mapped_column(Integer)
    timeout_s: Mapped[float | None] = mapped_column(Float)
    # The drill's probes (None: the default, every probe where the screen found
    # something; []: no drill) and the stall threshold given (None: derived).
    probes: Mapped[list[Any] | None] = mapped_column(JSON)
    stall_after_s: Mapped[float | None] = mapped_column(Float)
    # The time budget asked for (None: the default, services/measure/budget.py), and what
    # the budget did: its limit, whether it was given, and what it left out.
    budget_s: Mapped[float | None] = mapped_column(Float)
    budget: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # What the screen left out and why (for instance a quota this host cannot enforce).
    notes: Mapped[list[Any]] = mapped_column(default=list)
    # Seed of the screen's run order within each round (random, so that a drift of the
    # machine does not always favour one configuration); kept so a job can be replayed.
    screen_seed: Mapped[int | None] = mapped_column(BigInteger)
    # Where the screen and the drill ran and the node's measurement locks each held:
    # [{"phase", "node", "locks"}] (services/measure/nodelock.py). None before 0014.
    measured_on: Mapped[list[Any] | None] = mapped_column(JSON)
    # The node class its screen ran on (services/jobs/node_class.py): the CPU model
    # (/proc/cpuinfo), the CPUs the executor could use (the Docker engine's, or this
    # host's) and the runner image (None: the local executor, the host itself). None on
    # jobs from before 0024 and on sharded jobs, whose shards may run on different nodes.
    cpu_model: Mapped[str | None] = mapped_column(String(200))
    engine_cpus: Mapped[str | None] = mapped_column(String(200))
    runner_image: Mapped[str | None] = mapped_column(String(255))
    # The Thresholds the rules judged it with (each worker reads them from its
    # environment), as a JSON object of field to number. None before 0024.
    thresholds: Mapped[dict[str, float] | None] = mapped_column(JSON)
    # A gate job's verdicts against history (services/jobs/gate.py GateResult.as_json):
    # None for a matrix, and for a gate that could not judge (the matrix ran instead).
    gate: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text)
    # What the job will cost, created to finished (services/jobs/forecast.py): the latest
    # prediction and when it was made, and the first made from a run (kept, so that the
    # finished job shows it beside the actual time). None: no prediction yet (before 0032).
    predicted_s: Mapped[float | None] = mapped_column(Float)
    predicted_at: Mapped[dt.datetime | None] = mapped_column()
    first_predicted_s: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    started_at: Mapped[dt.datetime | None] = mapped_column()
    finished_at: Mapped[dt.datetime | None] = mapped_column()

    project: Mapped[Project] = relationship(back_populates="jobs")
    configs: Mapped[list[JobConfig]] = relationship(
        back_populates="job", order_by="JobConfig.position", cascade="all, delete-orphan"
    )
    evidence: Mapped[list[Evidence]] = relationship(back_populates="job", cascade="all, delete-orphan")
    findings: Mapped[list[Finding]] = relationship(back_populates="job", cascade="all, delete-orphan")


class JobConfig(Base):
    """One CPU configuration of a job, e.g. ``cpuset=0`` or ``cpus=0.5``."""

    __tablename__ = "job_configs"
    __table_args__ = (UniqueConstraint("job_id", "label", name="uq_job_configs_job_id_label"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    label: Mapped[str] = mapped_column(String(200))
    cpus: Mapped[float | None] = mapped_column(Float)
    cpuset: Mapped[str | None] = mapped_column(String(200))

    job: Mapped[Job] = relationship(back_populates="configs")
    runs: Mapped[list[Run]] = relationship(back_populates="config", order_by="Run.id", cascade="all, delete-orphan")


class Run(Base):
    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    config_id: Mapped[int] = mapped_column(ForeignKey("job_configs.id", ondelete="CASCADE"), index=True)
    kind: Mapped[RunKind] = mapped_column(_enum(RunKind), default=RunKind.timing)
    repetition: Mapped[int] = mapped_column(Integer)
    wall_s: Mapped[float] = mapped_column(Float)
    user_s: Mapped[float] = mapped_column(Float)
    sys_s: Mapped[float] = mapped_column(Float)
    max_rss_kb: Mapped[int] = mapped_column(Integer)
    voluntary_ctx_switches: Mapped[int] = mapped_column(Integer)
    involuntary_ctx_switches: Mapped[int] = mapped_column(Integer)
    exit_code: Mapped[int] = mapped_column(Integer)
    timed_out: Mapped[bool] = mapped_column(default=False)
    # cgroup cpu.stat; None where the run had no quota (no cgroup was made).
    nr_periods: Mapped[int | None] = mapped_column(Integer)
    nr_throttled: Mapped[int | None] = mapped_column(Integer)
    throttled_s: Mapped[float | None] = mapped_column(Float)
    # Average CPUs that other processes kept busy during the run: a loaded neighbour
    # core changes the latency under study, so the report warns about it.
    foreign_cpus: Mapped[float] = mapped_column(Float, default=0.0)
    # How long the command's main thread waited on a run queue for a CPU (/proc/PID/
    # schedstat): the wait an average busy core cannot tell. None: not known (older runs).
    run_delay_s: Mapped[float | None] = mapped_column(Float)
    # read()-family syscalls and bytes (/proc io syscr and rchar of the reaped command).
    read_syscalls: Mapped[int | None] = mapped_column(Integer)
    read_bytes: Mapped[int | None] = mapped_column(BigInteger)
    # The last lines the command printed, kept when it failed so the report can show why.
    output_tail: Mapped[str | None] = mapped_column(Text)
    # Which probe ran, and the test it was narrowed to (pytest node id): on evidence runs,
    # whose wall time next to the timing runs' median is the observer effect, and on the
    # survey's run that the census traced (``traced``).
    probe: Mapped[str | None] = mapped_column(String(32))
    test_id: Mapped[str | None] = mapped_column(Text)
    # The shard (JobShard.index) whose screen ran it; None for a job screened whole. Runs
    # of one shard are compared only with each other: one shard, one node.
    shard: Mapped[int | None] = mapped_column(Integer)
    # How many processes ran its tests at once, as lagtrace read the pytest command and its
    # configuration (pytest-xdist's -n; services/measure/pytest_workers.py xdist_workers):
    # its tests' durations add up to at most this many times its wall time. None: not a
    # pytest run, a run from before 0028, or a command whose workers could not be told.
    test_workers: Mapped[int | None] = mapped_column(Integer)
    # The commit it ran at, where a job's runs are of several commits (a bisect's); None:
    # the job's own commit (its source's), or a run from before 0030.
    commit_sha: Mapped[str | None] = mapped_column(String(64))
    started_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    config: Mapped[JobConfig] = relationship(back_populates="runs")
    test_results: Mapped[list[TestResult]] = relationship(back_populates="run", cascade="all, delete-orphan")

    @property
    def traced(self) -> bool:
        """A tracer ran beside the command (the census's strace on a survey run, a probe on
        an evidence run): its clock is the tracer's too, so its durations are evidence,
        never timing (strace's census tripled click's suite on two cores). SQL: UNTRACED."""
        return self.probe is not None


# The runs no tracer ran beside, in a query (Run.traced in Python): the only ones whose
# durations are timing.
UNTRACED = Run.probe.is_(None)


class TestResult(Base):
    """One test case's duration in one run (from the JUnit XML pytest wrote)."""

    __tablename__ = "test_results"
    __test__ = False  # not a pytest test class
    # A test's results by run, without reading all of them (a job's test page, services/jobs/submit.py).
    __table_args__ = (Index("ix_test_results_test_id_run_id", "test_id", "run_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    # Indexed: the test catalogue reads one test's history across jobs.
    test_id: Mapped[str] = mapped_column(Text, index=True)
    duration_s: Mapped[float] = mapped_column(Float)
    outcome: Mapped[str] = mapped_column(String(16))
    # Where the test is defined (JUnit's line attribute, 1-based), for check-run annotations.
    line: Mapped[int | None] = mapped_column(Integer)

    run: Mapped[Run] = relationship(back_populates="test_results")


class Evidence(Base):
    __tablename__ = "evidence"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    config_id: Mapped[int | None] = mapped_column(ForeignKey("job_configs.id", ondelete="CASCADE"))
    # The evidence run that produced it.
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    test_id: Mapped[str | None] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(String(32))
    content: Mapped[dict[str, Any]] = mapped_column(default=dict)
    text: Mapped[str | None] = mapped_column(Text)
    artifacts: Mapped[list[Any]] = mapped_column(default=list)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    job: Mapped[Job] = relationship(back_populates="evidence")
    config: Mapped[JobConfig | None] = relationship()
    run: Mapped[Run | None] = relationship()

    @property
    def parsed(self) -> EvidenceContent:
        """The content as its kind's model (services/evidence.py)."""
        return evidence_model.parse(self.kind, self.content)


class Finding(Base):
    __tablename__ = "findings"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(32), index=True)
    severity: Mapped[str] = mapped_column(String(16))
    title: Mapped[str] = mapped_column(Text)
    detail: Mapped[str] = mapped_column(Text)
    config_label: Mapped[str | None] = mapped_column(String(200))
    # Indexed: a test's page and change-point search read a test's findings among all of them.
    test_id: Mapped[str | None] = mapped_column(Text, index=True)
    # The numbers the finding rests on, for the report, the dashboard and later rules.
    metrics: Mapped[dict[str, Any]] = mapped_column(default=dict)
    evidence_ids: Mapped[list[Any]] = mapped_column(default=list)
    fingerprint: Mapped[str] = mapped_column(String(64), index=True)
    # Triage (the dashboard groups these by fingerprint across jobs: docs/guides/dashboard.md).
    status: Mapped[TriageStatus] = mapped_column(_enum(TriageStatus), default=TriageStatus.new)
    assignee: Mapped[str | None] = mapped_column(String(200))
    note: Mapped[str | None] = mapped_column(Text)
    # The same fingerprint was marked fixed in an earlier job and is back.
    regression: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    job: Mapped[Job] = relationship(back_populates="findings")


# --- The service: where jobs came from, who may call the API, the task ledger. ---


class TaskState(str, enum.Enum):
    pending = "pending"
    running = "running"
    done = "done"
    failed = "failed"
    cancelled = "cancelled"


class JobSource(Base):
    """Where a service job's code comes from, the runner image, and its GitHub check run.

    Kept beside the job rather than on it: `lagtrace run` jobs have none of this.
    """

    __tablename__ = "job_sources"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))  # "git" or "archive"
    repository_url: Mapped[str | None] = mapped_column(Text)
    ref: Mapped[str | None] = mapped_column(String(255))
    # The commit the ref resolved to at prepare time: a rerun measures the same code.
    commit_sha: Mapped[str | None] = mapped_column(String(64))
    # An uploaded tarball lives in the database so that every worker node can unpack it.
    # Deferred: read only where it is unpacked or copied, never by a list of jobs, which
    # reads up to 200 sources a request (tests/api/test_archive_reads.py).
    archive: Mapped[bytes | None] = mapped_column(LargeBinary, deferred=True)
    # True when command and configurations are read from the repository's .lagtrace.yml.
    from_repository_config: Mapped[bool] = mapped_column(default=False)
    image: Mapped[str | None] = mapped_column(String(255))
    # GitHub: the repository (owner/name), the commit the check run belongs to, its id.
    github_repository: Mapped[str | None] = mapped_column(String(255))
    github_head_sha: Mapped[str | None] = mapped_column(String(64))
    github_check_run_id: Mapped[int | None] = mapped_column(BigInteger)
    # A fork's pull request: .lagtrace.yml is read at this commit of the base branch.
    config_commit_sha: Mapped[str | None] = mapped_column(String(64))
    # The branch pushed or proposed; for a pull request its number, page and base commit
    # (screened interleaved with the head: services/jobs/pull_requests.py).
    branch: Mapped[str | None] = mapped_column(String(255))
    base_ref: Mapped[str | None] = mapped_column(String(255))
    base_commit_sha: Mapped[str | None] = mapped_column(String(64))
    pull_request_number: Mapped[int | None] = mapped_column(Integer)
    pull_request_url: Mapped[str | None] = mapped_column(Text)
    # What fails the check run (.lagtrace.yml `fail_on`; None: the default policy).
    fail_on: Mapped[list[Any] | None] = mapped_column(JSON)
    # A push: the commit its branch pointed at before, and how many commits it brought
    # (the webhook's `before` and `commits`). A regression its gate finds on several
    # commits is bisected between the two (services/jobs/bisect_jobs.py bisect_regressions)
    # unless .lagtrace.yml's `bisect_regressions` is false (None: the default, true).
    before_commit_sha: Mapped[str | None] = mapped_column(String(64))
    pushed_commits: Mapped[int | None] = mapped_column(Integer)
    bisect_regressions: Mapped[bool | None] = mapped_column()

    job: Mapped[Job] = relationship()


class Bisect(Base):
    """A bisect job's request and result (services/jobs/bisect_step.py): which commit
    between ``good`` and ``bad`` changed one test's time in the job's one configuration."""

    __tablename__ = "bisects"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    # Indexed: a test's page lists its bisects. None: the whole command timed (any program).
    test_id: Mapped[str | None] = mapped_column(Text, index=True)
    # The revisions as asked for (a branch, a tag, a commit), and the commits they resolved
    # to when the step fetched the repository (None until then).
    good: Mapped[str] = mapped_column(String(255))
    bad: Mapped[str] = mapped_column(String(255))
    good_sha: Mapped[str | None] = mapped_column(String(64))
    bad_sha: Mapped[str | None] = mapped_column(String(64))
    # services/jobs/bisect.py BisectResult.as_json(); None until the search ends.
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # The push's gate whose regression started it (None: asked for by hand).
    started_by_job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))

    job: Mapped[Job] = relationship(foreign_keys=[job_id])


class BaseComparison(Base):
    """One test (None: the whole command) in one configuration, head against base."""

    __tablename__ = "base_comparisons"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    config_label: Mapped[str] = mapped_column(String(200))
    test_id: Mapped[str | None] = mapped_column(Text)
    base_median_s: Mapped[float] = mapped_column(Float)
    head_median_s: Mapped[float] = mapped_column(Float)
    base_n: Mapped[int] = mapped_column(Integer)
    head_n: Mapped[int] = mapped_column(Integer)
    # head median / base median, and its bootstrap interval; None when a median is 0.
    ratio: Mapped[float | None] = mapped_column(Float)
    ratio_low: Mapped[float | None] = mapped_column(Float)
    ratio_high: Mapped[float | None] = mapped_column(Float)
    p_value: Mapped[float | None] = mapped_column(Float)
    verdict: Mapped[str] = mapped_column(String(16))  # regressed, improved, unchanged, too_noisy


class JobTask(Base):
    """One step of a service job (prepare, screen one configuration, finish, notify).

    The database is the record of what ran: a message lost by the broker or a worker
    that died leaves a task pending or running past its lease, and the reconciler sends
    it again.
    """

    __tablename__ = "job_tasks"
    __table_args__ = (UniqueConstraint("job_id", "name", name="uq_job_tasks_job_id_name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    config_id: Mapped[int | None] = mapped_column(ForeignKey("job_configs.id", ondelete="CASCADE"))
    step: Mapped[str] = mapped_column(String(32))
    name: Mapped[str] = mapped_column(String(64))  # step, or step:config_id
    state: Mapped[TaskState] = mapped_column(_enum(TaskState), default=TaskState.pending, index=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # Until when the current holder (or the message in the queue) owns the task.
    lease_expires_at: Mapped[dt.datetime | None] = mapped_column()
    worker: Mapped[str | None] = mapped_column(String(200))
    error: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)

    job: Mapped[Job] = relationship()
    config: Mapped[JobConfig | None] = relationship()


class JobShard(Base):
    """A part of a job's tests screened by one step on one worker (services/jobs/shards.py):
    its survey and focused screen run every configuration, interleaved, on that worker's node."""

    __tablename__ = "job_shards"
    __table_args__ = (UniqueConstraint("job_id", "index", name="uq_job_shards_job_id_index"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    index: Mapped[int] = mapped_column(Integer)  # 1, 2, ...: its step is screen:shard-{index}
    # What the shard's pytest command is narrowed to: test files, or node ids of a file split.
    tests: Mapped[list[Any]] = mapped_column(default=list)
    test_count: Mapped[int] = mapped_column(Integer)
    # Its expected share of one round (seconds), from the previous job's durations; None
    # when it was balanced by test count alone (a first job).
    planned_s: Mapped[float | None] = mapped_column(Float)
    # What its screen wrote of the job's notes and budget record: its own, folded into the
    # job's by the last shard to finish (two shards writing the job's JSON at once lost one).
    notes: Mapped[list[Any]] = mapped_column(default=list)
    budget: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    measured_on: Mapped[list[Any] | None] = mapped_column(JSON)  # its screen's node and locks


class ApiToken(Base):
    """A Bearer token for one project. Only its SHA-256 is stored."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    # The first characters, so an operator can tell tokens apart without the secret.
    prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[dt.datetime | None] = mapped_column()
    revoked_at: Mapped[dt.datetime | None] = mapped_column()
    expires_at: Mapped[dt.datetime | None] = mapped_column()

    project: Mapped[Project] = relationship()


class WebhookDelivery(Base):
    """A GitHub delivery seen once: its id makes a redelivery a no-op."""

    __tablename__ = "webhook_deliveries"

    delivery_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    event: Mapped[str] = mapped_column(String(64))
    action: Mapped[str | None] = mapped_column(String(64))
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    outcome: Mapped[str] = mapped_column(Text)
    received_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    # The signed body's SHA-256: the same body under a new delivery id is a replay.
    body_sha256: Mapped[str | None] = mapped_column(String(64), unique=True)


class TriageEvent(Base):
    """One change of a finding's triage state, for the history the dashboard shows."""

    __tablename__ = "triage_events"

    id: Mapped[int] = mapped_column(primary_key=True)
    finding_id: Mapped[int] = mapped_column(ForeignKey("findings.id", ondelete="CASCADE"), index=True)
    actor: Mapped[str] = mapped_column(String(200))
    status: Mapped[TriageStatus] = mapped_column(_enum(TriageStatus))
    assignee: Mapped[str | None] = mapped_column(String(200))
    note: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


# --- The dashboard: people who sign in, and the projects each may see. ---


class User(Base):
    """A local dashboard account. Only a salted scrypt hash of the password is stored."""

    __tablename__ = "users"

    id: Mapped[int] = mapped_column(primary_key=True)
    username: Mapped[str] = mapped_column(String(200), unique=True)
    password_hash: Mapped[str] = mapped_column(String(255))
    # Admins see every project; everyone else the projects they are a member of.
    is_admin: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    last_sign_in_at: Mapped[dt.datetime | None] = mapped_column()
    # The dashboard's session cookie is signed, not stored: it carries this number, and a
    # sign-out raises it, so every cookie issued before (a copied one included) stops working.
    session_epoch: Mapped[int] = mapped_column(default=0)

    projects: Mapped[list[Project]] = relationship(secondary="project_members", order_by="Project.name")


class ServiceSecret(Base):
    """A secret the service makes for itself once and every process shares (the dashboard's
    cookie-signing key when LAGTRACE_SECRET_KEY is unset): the database is what every
    `serve` process, on any host, has in common."""

    __tablename__ = "service_secrets"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class ProjectMember(Base):
    __tablename__ = "project_members"

    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True)


class Worker(Base):
    """A running `lagtrace worker` (its main process), refreshed by its own heartbeat
    whether or not it runs a step (services/jobs/workers.py): the service knows which
    workers are alive from the database, not from the broker."""

    __tablename__ = "workers"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)  # host/pid
    node: Mapped[str | None] = mapped_column(String(255))  # the Kubernetes node (LAGTRACE_NODE_NAME)
    cpus: Mapped[str] = mapped_column(String(255))  # the CPUs it measures on, a kernel list
    cpu_model: Mapped[str | None] = mapped_column(String(200))
    concurrency: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    heartbeat_at: Mapped[dt.datetime] = mapped_column(default=utcnow, index=True)


class MatrixSchedule(Base):
    """How often a branch the project keeps history on gets a matrix job
    (`.lagtrace.yml` ``matrix_every_h``, as its newest push job read it), and the job whose
    source the next one is built from: that push, on the branch's latest pushed commit
    (services/jobs/schedule.py; docs/guides/github.md, scheduled matrix jobs)."""

    __tablename__ = "matrix_schedules"
    __table_args__ = (UniqueConstraint("project_id", "branch", name="uq_matrix_schedules_project_id_branch"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    branch: Mapped[str] = mapped_column(String(255))
    # Hours between matrix jobs; None: the newest push's .lagtrace.yml sets none (never).
    every_h: Mapped[float | None] = mapped_column(Float)
    # The push job that read it (its command, configurations and commit are the next
    # scheduled job's); None once that job is deleted, until the next push.
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    # When a pass last created (or failed to create) its job, and why it failed: a failure
    # waits every_h like a success, rather than being retried every pass.
    attempted_at: Mapped[dt.datetime | None] = mapped_column()
    error: Mapped[str | None] = mapped_column(Text)
