"""What every executor (local, docker) offers the screen and the drill."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from services.measure.configs import CpuConfig


@dataclass(frozen=True)
class ToolResult:
    returncode: int
    stdout: str
    stderr: str
    duration_s: float


class ProcessHandle(Protocol):
    """A command that is running, as the evidence tools see it.

    Executor-neutral on purpose: the local executor runs tools on the host, the docker
    executor runs them with `docker exec` inside the job's container, so the probes in
    services/probes never need to know where the command lives.
    """

    pid: int  # the command's pid in the namespace where tools run

    def run_tool(self, argv: list[str], timeout_s: float | None = None) -> ToolResult:
        """Run an evidence tool (py-spy dump, gcore, gdb) beside the command."""

    def copy_out(self, path: str, host_path: Path) -> None:
        """Bring a file a tool wrote (path as the tool sees it) to host_path."""


class RunWatcher(Protocol):
    """Acts while a run is in flight, e.g. the stall trigger that snapshots a slow run."""

    def started(self, handle: ProcessHandle) -> None:
        """Called right after the command started; must return at once (start a timer)."""

    def finished(self) -> None:
        """Called once the command has ended, before the executor cleans up."""


@dataclass(frozen=True)
class RunRequest:
    command: list[str]
    workdir: Path
    config: CpuConfig
    # Where this run's files go (captured output, the JUnit XML); made by the caller.
    run_dir: Path
    timeout_s: float | None = None
    env: dict[str, str] = field(default_factory=dict)
    watcher: RunWatcher | None = None
    # Labels the run's container (docker executor) so a job's leftovers can be found.
    job_id: int | None = None
    # The stall clock's spec (executors/stall_clock.py StallClock): the process that
    # owns the run's clock freezes the command at the stall deadline and snapshots it.
    stall_clock: dict[str, Any] | None = None
    # An evidence tool attaches to the command (strace, py-spy, gdb): only then may the
    # run's container use ptrace (docker: CAP_SYS_PTRACE).
    ptrace: bool = False


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
    foreign_cpus: float = 0.0  # CPUs other processes kept busy meanwhile (services/hostload.py)
    # The command's main thread's time waiting for a CPU (hostload.run_delay_s); None: not known.
    run_delay_s: float | None = None
    # read()-family syscalls and their bytes (/proc io syscr, rchar): socket recv*() is
    # not counted there, strace evidence covers it.
    read_syscalls: int | None = None
    read_bytes: int | None = None
    # The kernel killed a process of the run for memory above its limit (docker executor).
    oom_killed: bool = False


class Executor(Protocol):
    name: str

    def available_cpus(self) -> tuple[int, ...]:
        """The CPUs configurations may name."""

    def quota_unsupported_reason(self) -> str | None:
        """None where ``cpus=`` quotas are enforced; otherwise why they cannot be."""

    def prepare(self, workdir: Path, progress: Callable[[str], None]) -> None:
        """Make the job's environment (dependencies) ready once, before any run."""

    def check_command(self, command: list[str], workdir: Path) -> None:
        """Raise BadInput when the command cannot be started as given."""

    def visible_path(self, run_dir: Path, name: str = "") -> str:
        """How ``run_dir / name`` is named from inside the command's environment."""

    def repository_paths(self, text: str) -> str:
        """``text`` (what a tool reported: a frame's file, a traced path) with the paths
        that name the checkout as the command saw it made relative to the checkout."""

    def tool_path(self, name: str) -> str | None:
        """Where an evidence tool (strace, gdb, gcore, py-spy) is for the command, or None."""

    def run(self, request: RunRequest) -> RunResult:
        """Run the command once and measure it."""
