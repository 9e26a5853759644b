"""What every executor (local, docker) offers the screen and the drill."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from services.configs import CpuConfig


@dataclass(frozen=True)
class RunRequest:
    command: list[str]
    workdir: Path
    config: CpuConfig
    # Where this run's files go (captured output, the JUnit XML); made by the caller.
    run_dir: Path
    timeout_s: float | None = None
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RunResult:
    wall_s: float
    user_s: float
    sys_s: float
    max_rss_kb: int
    voluntary_ctx_switches: int
    involuntary_ctx_switches: int
    exit_code: int  # negative: killed by that signal, as subprocess reports it
    timed_out: bool
    nr_periods: int | None
    nr_throttled: int | None
    throttled_s: float | None
    output_tail: str | None  # the last lines the command printed, when it failed


class Executor(Protocol):
    name: str

    def available_cpus(self) -> tuple[int, ...]:
        """The CPUs configurations may name."""

    def quota_unsupported_reason(self) -> str | None:
        """None where ``cpus=`` quotas are enforced; otherwise why they cannot be."""

    def check_command(self, command: list[str], workdir: Path) -> None:
        """Raise BadInput when the command cannot be started as given."""

    def visible_path(self, host_path: Path) -> str:
        """How a file under a run_dir is named from inside the command's environment."""

    def run(self, request: RunRequest) -> RunResult:
        """Run the command once and measure it."""
