"""What every evidence probe shares: its context, what it hands back, and how a probe that
cannot run says so.

A probe only touches the command through the executor interface (tool_path,
visible_path) and the ProcessHandle (run_tool, copy_out), so the same probe works for
the local executor and inside a docker container.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.evidence import EvidenceContent, EvidenceKind, EvidenceStatus, content_model
from services.measure.executors.base import Executor, ProcessHandle, RunResult, RunWatcher, ToolResult
from services.measure.probes.stall import StopBeforeTimeout

OK = EvidenceStatus.ok
UNAVAILABLE = EvidenceStatus.unavailable
DENIED = EvidenceStatus.denied
FAILED = EvidenceStatus.failed
NO_STALL = EvidenceStatus.no_stall
ENDED = EvidenceStatus.ended

# What gdb/gcore print when the process is gone: checked before the denial markers,
# since "ptrace: No such process." would otherwise read as a denial.
PROCESS_GONE_MARKERS = ("No such process", "The program is not being run", "without a process to debug")

PTRACE_DENIED_MARKERS = ("Operation not permitted", "Permission denied", "ptrace: ", "EPERM")


@dataclass
class ArtifactFile:
    """A file a probe produced on the host, to be put into the artifact store."""

    name: str
    path: Path
    media_type: str


@dataclass
class EvidenceDraft:
    kind: EvidenceKind
    content: EvidenceContent
    text: str | None = None
    files: list[ArtifactFile] = field(default_factory=list)

    @property
    def status(self) -> EvidenceStatus:
        return self.content.status


def unavailable(kind: EvidenceKind, reason: str, status: EvidenceStatus = UNAVAILABLE, **extra: Any) -> EvidenceDraft:
    return EvidenceDraft(kind=kind, content=content_model(kind)(status=status, reason=reason, **extra))


def tool_failure(kind: EvidenceKind, tool: str, result: ToolResult, **extra: Any) -> EvidenceDraft:
    """Evidence saying a tool ran but failed, telling a ptrace denial apart from other errors."""
    output = (result.stderr or "") + (result.stdout or "")
    if any(marker in output for marker in PROCESS_GONE_MARKERS):
        reason = f"the process ended while {tool} was attaching to it: {_last_lines(output)}"
        return unavailable(kind, reason, ENDED, **extra)
    if any(marker in output for marker in PTRACE_DENIED_MARKERS):
        reason = (
            f"{tool} was not permitted to trace the process (ptrace denied: it needs "
            f"CAP_SYS_PTRACE or kernel.yama.ptrace_scope=0): {_last_lines(output)}"
        )
        return unavailable(kind, reason, DENIED, **extra)
    reason = f"{tool} failed with exit status {result.returncode}: {_last_lines(output)}"
    return unavailable(kind, reason, FAILED, **extra)


def missing_tool(kind: EvidenceKind, tool: str, executor: Executor) -> EvidenceDraft:
    return unavailable(kind, f"{tool} is not installed where the command runs ({executor.name} executor)")


def _last_lines(text: str, lines: int = 3) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return " / ".join(kept) or "no output"


@dataclass
class ProbeContext:
    executor: Executor
    run_dir: Path  # this evidence run's directory on the host
    stall_after_s: float
    timeout_s: float | None
    last_snapshot_lead_s: float = 1.0
    # The stall deadline counts from the drilled pytest test's start (reported by a
    # plugin), not from the process's.
    per_test: bool = False
    # The fast side of a comparison: its snapshot shows what a fast run does, and is no
    # stall (services/measure/drill.py takes it half-way through a typical fast run).
    comparison: bool = False


class Probe(ABC):
    """One evidence run's instrument. A fresh instance per run: it may keep state.

    The drill calls, in order: ``unavailable()`` (skip the run if it says why),
    ``command()``/``env()``/``watcher()`` to build the run, then ``collect()``.
    """

    name = ""
    kind: EvidenceKind  # what the probe stores when it cannot look (its main evidence)
    # Its tool attaches to the command with ptrace(2) or reads its memory (strace, py-spy,
    # gdb): the executor grants CAP_SYS_PTRACE to this probe's runs and to no other run.
    ptrace = False

    def __init__(self, context: ProbeContext):
        self.context = context

    def unavailable(self) -> EvidenceDraft | None:
        return None

    def command(self, command: list[str]) -> list[str]:
        return command

    def env(self) -> dict[str, str]:
        return {}

    def watcher(self) -> RunWatcher | None:
        return None

    def stall_clock(self) -> dict[str, Any] | None:
        """The stall clock the executor runs for this run (RunRequest.stall_clock)."""
        return None

    @abstractmethod
    def collect(self, result: RunResult) -> list[EvidenceDraft]:
        """The evidence of the finished run (files under run_dir are on the host now)."""

    def visible(self, name: str) -> str:
        return self.context.executor.visible_path(self.context.run_dir, name)

    def copy_back(self, handle: ProcessHandle, name: str) -> Path:
        host_path = self.context.run_dir / name
        handle.copy_out(self.visible(name), host_path)
        return host_path


class TracerProbe(Probe):
    """A probe that runs the command under a tracer (strace, py-spy record).

    The tracer is stopped with ``stop_signal`` just before the hard timeout, so a run
    that never ends still yields its summary or profile (the executor's SIGKILL of the
    process group would lose it); ``stopped_before_timeout`` says it happened.
    """

    tool = ""
    stop_signal = "TERM"
    ptrace = True

    def __init__(self, context: ProbeContext):
        super().__init__(context)
        self.tool_path = context.executor.tool_path(self.tool)
        self._stopper: StopBeforeTimeout | None = None

    def unavailable(self) -> EvidenceDraft | None:
        if self.tool_path is None:
            return missing_tool(self.kind, self.tool, self.context.executor)
        return None

    @property
    def found_tool(self) -> str:
        """The tool's path; the drill asks unavailable() before it builds the command."""
        if self.tool_path is None:
            raise RuntimeError(f"{self.tool} is not available: unavailable() was not asked first")
        return self.tool_path

    def watcher(self) -> StopBeforeTimeout:
        self._stopper = StopBeforeTimeout(
            self.context.executor.tool_path("kill"),
            self.stop_signal,
            self.context.timeout_s,
            self.context.last_snapshot_lead_s,
        )
        return self._stopper

    @property
    def stopped_before_timeout(self) -> bool:
        return self._stopper is not None and self._stopper.stopped
