"""Typed settings, read once from ``LAGTRACE_*`` environment variables and passed down."""

from __future__ import annotations

import hashlib
import ipaddress
import os
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from services.errors import Misconfigured
from services.thresholds import Thresholds

# The runner image's user (services/measure/executors/docker_guards.py): it reads the checkouts.
RUNNER_UID = 1000


def _data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "lagtrace"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LAGTRACE_", env_nested_delimiter="__", extra="ignore")

    # The embedded default is a SQLite file, so `lagtrace run` needs no server.
    database_url: str = Field(default_factory=lambda: f"sqlite:///{_data_dir() / 'lagtrace.db'}")
    # Unset: jobs run in-process (`lagtrace serve` runs them itself, one at a time).
    broker_url: str | None = None
    artifact_dir: Path = Field(default_factory=lambda: _data_dir() / "artifacts")
    # Evidence artifacts (cores, flame graphs) are stored zstd-compressed; one larger than
    # this after compression is left out and its evidence says so. Cores of big test
    # processes are hundreds of MB raw but compress well (150 MB -> about 1 MB here).
    artifact_max_bytes: int = Field(256 * 1024 * 1024, gt=0)
    artifact_zstd_level: int = Field(3, ge=1, le=22)
    # Artifacts older than this are deleted (the parsed evidence stays in the database).
    artifact_retention_days: float = Field(30.0, gt=0)
    # Set: artifacts go to this S3-compatible bucket instead of artifact_dir, so the API
    # serves what any worker stored (AWS S3, MinIO, Ceph; the endpoint unset means AWS).
    # Without keys, boto3's own chain supplies credentials (IRSA, instance profile).
    artifacts_s3_bucket: str | None = None
    artifacts_s3_prefix: str = ""
    artifacts_s3_endpoint_url: str | None = None
    artifacts_s3_region: str | None = None
    artifacts_s3_access_key_id: SecretStr | None = None
    artifacts_s3_secret_access_key: SecretStr | None = None
    artifacts_s3_path_style: bool = True
    # Where the local executor makes its per-run cgroups (v1: below the cpu hierarchy,
    # v2: below the unified root).
    cgroup_root: Path = Path("/sys/fs/cgroup")
    cgroup_name: str = "lagtrace"
    # The docker executor: the runner image (built by services/measure/executors/runner/), the
    # limits every run container gets, and the network the prepare step installs with
    # ("host" where the engine runs without a bridge, as in this project's CI).
    docker_image: str = "lagtrace-runner:latest"
    docker_memory: str = "2g"
    docker_pids_limit: int = 1024
    docker_tmpfs_size: str = "1g"
    # The prepare step runs the repository's own code (pip builds its packages), so it has
    # no network unless the operator opts in: "index" (the sealed network: it reaches
    # package_index_url and nothing else, services/measure/executors/prepare_network.py),
    # or a docker network name ("host" only on a machine with nothing else to reach: it is
    # the node's own network, with its database and broker).
    docker_prepare_network: str = "none"
    docker_prepare_timeout_s: float = Field(900.0, gt=0)
    # The one index the prepare step's pip uses (PIP_INDEX_URL, e.g. a pypiserver or devpi
    # in the cluster); no credentials in it (the repository's code would read them), and
    # the worker's own PIP_* and proxy variables are never passed.
    package_index_url: str | None = None
    # The docker network the index relay reaches the index through (the engine's default
    # bridge, or the network an index container is on).
    docker_index_uplink: str = "bridge"
    # A Docker engine that stops answering (restarting, socket refused, timeouts, 5xx) is
    # waited for this long, retrying with backoff, while the step keeps its lease; the step
    # is then given back (at once and not counted if the engine answers again, else after
    # this long again), and fails saying the engine was unavailable once its attempts are used.
    docker_engine_wait_s: float = Field(120.0, gt=0)
    thresholds: Thresholds = Field(default_factory=Thresholds)

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    # --- The service (lagtrace serve / worker) -------------------------------------
    # Where the API is reached from outside: links in GitHub check runs point here.
    public_url: str = "http://127.0.0.1:8080"
    github_webhook_secret: SecretStr | None = None
    github_api_url: str = "https://api.github.com"
    # A token allowed to write check runs (a GitHub App installation token or a PAT).
    github_token: SecretStr | None = None
    github_check_name: str = "lagtrace"
    # Bearer token Prometheus sends to scrape /metrics; unset, /metrics answers 403 (its
    # counts span every project, so it is not public).
    metrics_token: SecretStr | None = None
    # Checkouts and unpacked archives of service jobs, one directory per task, each
    # bind-mounted into the run containers (whose uid 1000 must read it, not its parents).
    work_dir: Path = Field(default_factory=lambda: _data_dir() / "work")
    # file:// and plain paths read the server's own disk: only for tests and one-machine use.
    allow_file_repositories: bool = False
    # The hosts https:// repositories may be cloned from, comma-separated ("*": any host).
    # Unset: github.com and the GitHub Enterprise host of github_api_url, if it is one.
    repository_hosts: Annotated[list[str] | None, NoDecode] = None
    # A repository host whose address is loopback, link-local, private or otherwise not
    # global (the cloud's metadata service, the cluster's own services) is refused unless
    # the address is in one of these networks (comma-separated CIDRs, e.g. a GitHub
    # Enterprise at 10.20.0.0/16). Every address the host resolves to is checked, and git
    # connects only to those (http.curloptResolve; no redirects).
    repository_allowed_networks: Annotated[list[str], NoDecode] = Field(default_factory=list)
    max_archive_bytes: int = Field(50 * 1024 * 1024, gt=0)
    # What one project's uploaded archives may hold in the database together: a new one
    # drops the oldest finished jobs' archives first (services/jobs/archives.py).
    max_project_archive_bytes: int = Field(1024 * 1024 * 1024, gt=0)
    # An uploaded tarball unpacked: total bytes, members, and unpacked/packed ratio (a bomb).
    max_archive_unpacked_bytes: int = Field(500 * 1024 * 1024, gt=0)
    max_archive_members: int = Field(20000, gt=0)
    max_archive_ratio: float = Field(100.0, gt=1)
    # What one archive's paths may be: the bytes of a member's path or a link's target
    # (Linux's PATH_MAX), and their depth in directories; and the size of one extended
    # (PAX or GNU long-name) header, which tarfile reads whole. Headers, directories and
    # link text count toward the members and the unpacked bytes above.
    max_archive_path_bytes: int = Field(4096, gt=0)
    max_archive_path_depth: int = Field(64, gt=0)
    max_archive_header_bytes: int = Field(64 * 1024, ge=512)
    # The unpacking runs in a child process of its own with these caps: its address space
    # (RLIMIT_AS: an xz stream's dictionary is allocated there), its CPU time (RLIMIT_CPU)
    # and its wall time.
    max_archive_memory_bytes: int = Field(256 * 1024 * 1024, ge=32 * 1024 * 1024)
    max_archive_cpu_s: int = Field(60, gt=0)
    archive_unpack_timeout_s: float = Field(120.0, gt=0)
    clone_timeout_s: float = Field(300.0, gt=0)
    # A worker removes the checkouts of attempts whose process died (killed, OOM, a
    # restarted container) when it starts and this often; a live attempt's are kept.
    checkout_sweep_interval_s: float = Field(300.0, gt=0)
    # Check-run updates (GitHub API calls) a worker sends at once, on their own pool.
    check_run_concurrency: int = Field(4, ge=1, le=64)
    # A clone's checked-out tree (and any one file git writes) may not exceed this.
    max_clone_bytes: int = Field(1024 * 1024 * 1024, gt=0)
    # --- What a job may do (the service: API, dashboard, webhooks, workers) ----------
    # Executors a service job may use. `local` runs the job's code on the worker itself:
    # only for a deployment whose every submitter is trusted. `lagtrace run` ignores this.
    allowed_executors: Annotated[list[str], NoDecode] = Field(default_factory=lambda: ["docker"])
    # Without a timeout in the job, runs get the default; none may ask for more than the max.
    max_repeat: int = Field(30, ge=1)
    max_stall_after_s: float = Field(600.0, gt=0)
    # The shortest `matrix_every_h` a repository's .lagtrace.yml may ask for: a push asking
    # for less is refused, a schedule stored before runs this often. Each scheduled job runs
    # the whole matrix and is made by the server itself, not counted in
    # submissions_per_minute (docs/guides/github.md, scheduled matrix jobs).
    matrix_min_interval_h: float = Field(1.0, gt=0)
    # Stored evidence artifacts of one job, compressed; past it, artifacts are left out.
    artifact_job_quota_bytes: int = Field(1024 * 1024 * 1024, gt=0)
    # Abuse limits in a sliding minute: submissions per API token (and per dashboard user),
    # failed sign-ins per account and client, and per client whatever the names (spraying).
    # Kept in Redis where there is one (the broker's, or rate_limit_storage_url: shared by
    # every process and replica), else in the one serving process's memory.
    submissions_per_minute: int = Field(30, ge=1)
    sign_in_failures_per_minute: int = Field(5, ge=1)
    sign_in_client_failures_per_minute: int = Field(20, ge=1)
    # A redis:// (or rediss://) URL for the rate limits other than the broker's; "memory://"
    # keeps them in each process (not shared).
    rate_limit_storage_url: str | None = None
    # Proxies in front of the service that set X-Forwarded-For/-Proto (an Ingress: 1). The
    # client's address is then the one the nearest trusted proxy saw, not the proxy's own.
    # 0: the connection's address (a proxy's would be everybody's).
    trusted_proxies: int = Field(0, ge=0, le=5)
    # New API tokens expire after this many days (`lagtrace token create --days` overrides).
    token_days: float = Field(90.0, gt=0)
    # A task is killed at its hard limit, which must come before the broker hands the
    # unacknowledged message (late acks) to another worker; the ledger's lease outlives
    # the hard limit, so a reclaimed task is one whose worker is really gone.
    task_soft_time_limit_s: int = Field(3300, gt=0)
    task_time_limit_s: int = Field(3500, gt=0)
    broker_visibility_timeout_s: int = Field(3600, gt=0)
    task_max_attempts: int = Field(3, ge=1)
    # Leases measure liveness, not the task limit: the process running a step renews its
    # lease every heartbeat; a step whose process died is re-leased once its lease lapses
    # and the reconciler next runs, so the recovery bound is step_lease_s +
    # reconcile_interval_s (90 s by default). A queued step whose message was lost is
    # resent within the same bound.
    step_lease_s: float = Field(60.0, gt=0)
    heartbeat_interval_s: float = Field(15.0, gt=0)
    reconcile_interval_s: float = Field(30.0, gt=0)
    # While the database is unreachable a step waits, retrying every this many seconds,
    # instead of failing the job (which it could not record anyway).
    database_retry_s: float = Field(2.0, gt=0)
    # Every measured run ends: runs without a timeout get the default, and none may ask
    # for more than the maximum (both below the task's soft time limit).
    run_timeout_s: float = Field(1800.0, gt=0)
    run_timeout_max_s: float = Field(3000.0, gt=0)
    # Labels this installation's containers; the reaper removes only containers carrying
    # it, so two installations sharing a Docker engine leave each other's runs alone.
    # Unset: derived from the database URL (one database, one installation).
    installation_id: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,63}$")
    # `lagtrace migrate` waits this long for another migration's lock, then says so.
    migrate_lock_wait_s: float = Field(300.0, ge=0)
    # GitHub sends webhook payloads of at most 25 MB; a larger body is refused unread.
    webhook_max_bytes: int = Field(25 * 1000 * 1000, gt=0, le=25 * 1000 * 1000)
    # Touched by a worker's (and beat's) main loop every few seconds; Kubernetes' liveness
    # probe reads its age. Unset: no heartbeat file.
    worker_heartbeat_file: Path | None = None
    # A worker whose work directory has less free space takes no step, gives back one
    # that fails meanwhile, and is not ready (services/jobs/disk.py).
    min_free_disk_bytes: int = Field(512 * 1024 * 1024, ge=0)
    # The same for file entries: a file system out of inodes refuses every new file (a
    # checkout, a run directory) while its free bytes still show room.
    min_free_disk_inodes: int = Field(10_000, ge=0)
    # What one run may write to its run directory on the worker's disk (its output, the
    # evidence tools' files, a core of every Python process it runs): a run over it is
    # stopped and fails the job, counted (services/measure/executors/scratch.py).
    run_dir_max_bytes: int = Field(4 * 1024**3, ge=1024**2)
    # How many entries (files and directories) one run may make in its run directory: a
    # real suite's run makes tens (its output, the JUnit XML, a probe's file a process); a
    # run over it is stopped and fails the job, counted.
    run_dir_max_entries: int = Field(5_000, ge=64)
    # What a step's runs may write to their run directories in all, summed over its runs
    # (each run's directory goes once it is read): a run that takes the sum past it is
    # stopped and fails the job, counted (services/measure/executors/scratch.py).
    step_scratch_max_bytes: int = Field(32 * 1024**3, ge=1024**2)
    # The same in entries (files and directories), summed over a step's runs.
    step_scratch_max_entries: int = Field(100_000, ge=64)
    # The Kubernetes node a worker pod runs on (the chart sets it from the downward API).
    node_name: str | None = None
    # The directory of the node's measurement locks (services/measure/nodelock.py): every
    # worker of a node must name the same one, whatever its work directory (the chart
    # mounts one hostPath into every worker pod). Unset: WORK_DIR/locks, for one machine.
    node_lock_path: Path | None = None
    # The cgroup the Docker engine puts lagtrace's containers under (docker run
    # --cgroup-parent); its cpuset is then the CPUs configurations may name. Unset: the
    # engine's default parent.
    docker_cgroup_parent: str | None = None
    # Off by default: one measured run per node. On: runs pinned to disjoint cores may
    # share a node (more throughput, and the report says so).
    pack_disjoint_cores: bool = False
    # Shards across workers (services/jobs/shards.py): a pytest suite is split into at most
    # this many shards of tests, each screened by one worker, when its previous job's
    # surveyed time was at least shard_min_s per shard (a first job: at least
    # focus_min_tests tests per shard). 1: every job is screened whole on one worker.
    shards: int = Field(1, ge=1, le=64)
    shard_min_s: float = Field(30.0, ge=0)
    # This worker's own CPUs (kernel list, e.g. 1 or 2-3): configurations name CPUs of
    # this set (cpuset=0 is its first) and unpinned ones are pinned to all of it, so two
    # workers on one machine never measure on each other's cores. Unset: every CPU.
    worker_cpus: str | None = None
    # How many CPUs the measuring nodes have, as configurations name them (cpuset=0 up to
    # N-1, a quota up to N): a job naming others is refused when it is submitted, not
    # failed by its worker later. Unset: LAGTRACE_WORKER_CPUS' count where it is set,
    # else the CPUs this process may use (the API's host stands for the nodes).
    node_cpus: int | None = Field(None, ge=1, le=4096)
    # Branches whose history is searched for change points after each of their jobs
    # (slower_since: services/diagnose/change_points.py), comma-separated; empty: none.
    change_point_branches: Annotated[list[str], NoDecode] = Field(default_factory=lambda: ["main"])
    # --- The dashboard -----------------------------------------------------------
    # Signs the sign-in cookie. Unset: a random key made once and kept in the database
    # (services/accounts/secret_key.py), shared by every serving process and kept across
    # restarts. Set it (the chart does, from a Secret) to keep it out of the database.
    secret_key: SecretStr | None = None
    # Sign-in cookies are Secure (HTTPS only; browsers also accept them on
    # http://127.0.0.1 and localhost). Off only for a plain-HTTP deployment on another host.
    cookie_secure: bool = True
    session_hours: float = Field(12.0, gt=0)

    @field_validator("allowed_executors", mode="before")
    @classmethod
    def _executor_list(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("change_point_branches", mode="before")
    @classmethod
    def _branch_list(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("repository_hosts", "repository_allowed_networks", mode="before")
    @classmethod
    def _comma_list(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip().lower() for item in value.split(",") if item.strip()]
        return value

    @field_validator("repository_allowed_networks")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for item in value:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(f"LAGTRACE_REPOSITORY_ALLOWED_NETWORKS: {item!r} is not a network") from None
        return value

    @property
    def repository_host_list(self) -> list[str]:
        """The hosts repositories may be cloned from (see ``repository_hosts``)."""
        if self.repository_hosts is not None:
            return [host.lower() for host in self.repository_hosts]
        hosts = ["github.com"]
        api_host = (urlsplit(self.github_api_url).hostname or "").lower()
        if api_host and api_host not in ("api.github.com", "github.com"):
            hosts.append(api_host)  # GitHub Enterprise: https://HOST/api/v3
        return hosts

    @field_validator("allowed_executors")
    @classmethod
    def _known_executors(cls, value: list[str]) -> list[str]:
        unknown = [name for name in value if name not in ("docker", "local")]
        if unknown or not value:
            raise ValueError(f"LAGTRACE_ALLOWED_EXECUTORS: a comma-separated list of docker, local (got {value})")
        return value

    @field_validator("package_index_url")
    @classmethod
    def _index_without_credentials(cls, value: str | None) -> str | None:
        if value is not None:
            parts = urlsplit(value)
            # http:// too: an index inside the cluster, reached only through the relay.
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
                raise ValueError("LAGTRACE_PACKAGE_INDEX_URL: an http(s):// URL with a host, without user or password")
        return value

    @model_validator(mode="after")
    def _time_limits_nest(self) -> Settings:
        if self.docker_prepare_network == "index" and not self.package_index_url:
            raise ValueError("LAGTRACE_DOCKER_PREPARE_NETWORK=index needs LAGTRACE_PACKAGE_INDEX_URL")
        if not self.task_soft_time_limit_s < self.task_time_limit_s < self.broker_visibility_timeout_s:
            raise ValueError(
                "task time limits must nest: LAGTRACE_TASK_SOFT_TIME_LIMIT_S < LAGTRACE_TASK_TIME_LIMIT_S "
                "< LAGTRACE_BROKER_VISIBILITY_TIMEOUT_S (a task outliving the visibility timeout runs twice)"
            )
        if self.heartbeat_interval_s * 2 > self.step_lease_s:
            raise ValueError(
                "LAGTRACE_HEARTBEAT_INTERVAL_S must be at most half LAGTRACE_STEP_LEASE_S: "
                "one late heartbeat must not lose a live step its lease"
            )
        if self.run_timeout_s > self.run_timeout_max_s:
            raise ValueError("LAGTRACE_RUN_TIMEOUT_S must not exceed LAGTRACE_RUN_TIMEOUT_MAX_S")
        # A run ends at its own timeout only if the step running it lives that long: a run
        # cut off by the step's soft limit fails the whole job with SoftTimeLimitExceeded
        # instead of being stored as a timed-out run (which the report names).
        for name, value in (("RUN_TIMEOUT_S", self.run_timeout_s), ("RUN_TIMEOUT_MAX_S", self.run_timeout_max_s)):
            if value >= self.task_soft_time_limit_s:
                raise ValueError(
                    f"LAGTRACE_{name} ({value:g} s) must be below LAGTRACE_TASK_SOFT_TIME_LIMIT_S "
                    f"({self.task_soft_time_limit_s} s): a run that long would be cut off by the step's "
                    "time limit and fail the job instead of timing out"
                )
        return self

    @property
    def node_cpu_count(self) -> int:
        """The CPUs a configuration may name on the nodes (see ``node_cpus``)."""
        if self.node_cpus is not None:
            return self.node_cpus
        if self.worker_cpus:
            from services.measure.configs import parse_cpulist

            return len(parse_cpulist(self.worker_cpus))
        try:
            return len(os.sched_getaffinity(0))
        except AttributeError:  # not Linux
            return os.cpu_count() or 1

    @property
    def lease_s(self) -> float:
        """How long a step owns its ledger entry without a heartbeat."""
        return self.step_lease_s

    @property
    def recovery_bound_s(self) -> float:
        """The longest a step of a dead worker (or a lost message) waits to be sent again."""
        return self.step_lease_s + self.reconcile_interval_s

    @property
    def installation(self) -> str:
        """This installation's container label value (see ``installation_id``)."""
        if self.installation_id:
            return self.installation_id
        return hashlib.sha256(self.database_url.encode()).hexdigest()[:16]


def prepare_work_dir(settings: Settings) -> Path:
    """Make the work directory and check, at start-up, that a job's checkout made there can
    be read by the run containers' user; otherwise every job would fail, one by one, later.

    Checkouts are made with plain mkdir under the process's umask, so a probe directory
    made the same way has the mode a checkout gets. Only the checkout itself matters: it is
    bind-mounted, so its parents (a home of mode 0700) are never walked in the container.
    """
    directory = settings.work_dir
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".probe-{os.getpid()}"
        probe.mkdir(exist_ok=True)
        try:
            mode = probe.stat().st_mode
        finally:
            probe.rmdir()
    except OSError as exc:
        raise Misconfigured(
            f"LAGTRACE_WORK_DIR={directory}: cannot make a checkout there ({exc.strerror}); "
            "set LAGTRACE_WORK_DIR to a directory this user may write"
        ) from None
    if "docker" in settings.allowed_executors and os.geteuid() != RUNNER_UID and mode & 0o005 != 0o005:
        umask = os.umask(0)
        os.umask(umask)
        raise Misconfigured(
            f"LAGTRACE_WORK_DIR={directory}: checkouts made there (mode {mode & 0o777:04o} under umask "
            f"{umask:04o}) cannot be read by the run containers' user (uid {RUNNER_UID}); start with "
            "umask 022, or run as uid 1000"
        )
    return directory
