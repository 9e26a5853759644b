"""Typed settings, read once from ``LAGTRACE_*`` environment variables and passed down."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.thresholds import Thresholds


def _data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "lagtrace"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LAGTRACE_", env_nested_delimiter="__", extra="ignore")

    # The embedded default is a SQLite file, so `lagtrace run` needs no server.
    database_url: str = Field(default_factory=lambda: f"sqlite:///{_data_dir() / 'lagtrace.db'}")
    # Unset: jobs run in-process (filled by the service issue).
    broker_url: str | None = None
    artifact_dir: Path = Field(default_factory=lambda: _data_dir() / "artifacts")
    # Evidence artifacts (cores, flame graphs) are stored zstd-compressed; one larger than
    # this after compression is left out and its evidence says so. Cores of big test
    # processes are hundreds of MB raw but compress well (150 MB -> about 1 MB here).
    artifact_max_bytes: int = Field(256 * 1024 * 1024, gt=0)
    artifact_zstd_level: int = Field(3, ge=1, le=22)
    # Artifacts older than this are deleted (the parsed evidence stays in the database).
    artifact_retention_days: float = Field(30.0, gt=0)
    # Where the local executor makes its per-run cgroups (v1: below the cpu hierarchy,
    # v2: below the unified root).
    cgroup_root: Path = Path("/sys/fs/cgroup")
    cgroup_name: str = "lagtrace"
    # The docker executor: the runner image (built by services/executors/runner/), the
    # limits every run container gets, and the network the prepare step installs with
    # ("host" where the engine runs without a bridge, as in this project's CI).
    docker_image: str = "lagtrace-runner:latest"
    docker_memory: str = "2g"
    docker_pids_limit: int = 1024
    docker_tmpfs_size: str = "1g"
    docker_prepare_network: str = "bridge"
    thresholds: Thresholds = Field(default_factory=Thresholds)

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")
