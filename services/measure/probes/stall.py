"""The stall trigger: a RunWatcher that snapshots a run while it is still slow.

When the run passes the stall threshold it takes the snapshot (cheap, fast tools
first); shortly before the hard timeout kills a still-running command it takes a last,
lighter one. Analysis that burns CPU (gdb reading the core) waits until the command has
ended: CPU load beside the hand-off pathology changes it (DESIGN.md section 8).
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

from services.measure.executors.base import ProcessHandle

STALL = "stall"
BEFORE_TIMEOUT = "before_timeout"


class Snapshot(Protocol):
    def take(self, handle: ProcessHandle, phase: str, elapsed_s: float) -> None:
        """Capture state now, while the process is slow; keep analysis for later."""

    def analyse(self, handle: ProcessHandle) -> None:
        """Called once the command has ended (tools still usable), after every take()."""


class StallWatcher:
    def __init__(self, snapshot: Snapshot, stall_after_s: float, timeout_s: float | None, last_snapshot_lead_s: float):
        self.snapshot = snapshot
        self.stall_after_s = stall_after_s
        self.timeout_s = timeout_s
        self.last_snapshot_lead_s = last_snapshot_lead_s
        self.phases: list[str] = []
        self._handle: ProcessHandle | None = None
        self._started = 0.0
        self._timers: list[threading.Timer] = []
        # Held while a snapshot runs: finished() waits for it, and no snapshot starts
        # once the command has ended.
        self._lock = threading.Lock()
        self._ended = False

    def started(self, handle: ProcessHandle) -> None:
        self._handle = handle
        self._started = time.monotonic()
        self._timers = [threading.Timer(self.stall_after_s, self._fire, (STALL,))]
        if self.timeout_s is not None:
            last = self.timeout_s - self.last_snapshot_lead_s
            # Only when it comes clearly after the stall snapshot: two back to back show
            # the same moment twice.
            if last > self.stall_after_s + self.last_snapshot_lead_s:
                self._timers.append(threading.Timer(last, self._fire, (BEFORE_TIMEOUT,)))
        for timer in self._timers:
            timer.daemon = True
            timer.start()

    def _fire(self, phase: str) -> None:
        with self._lock:
            if self._ended or self._handle is None:
                return
            self.phases.append(phase)
            self.snapshot.take(self._handle, phase, time.monotonic() - self._started)

    def finished(self) -> None:
        for timer in self._timers:
            timer.cancel()
        with self._lock:
            self._ended = True
        if self.phases and self._handle is not None:
            self.snapshot.analyse(self._handle)

    @property
    def stalled(self) -> bool:
        return STALL in self.phases


class StopBeforeTimeout:
    """Ends a wrapping tracer (strace, py-spy record) gracefully just before the hard
    timeout, so it still writes its summary or profile: the executor's SIGKILL of the
    whole process group would lose both.
    """

    def __init__(self, kill_tool: str | None, signal_name: str, timeout_s: float | None, lead_s: float):
        self.kill_tool = kill_tool
        self.signal_name = signal_name
        self.timeout_s = timeout_s
        self.lead_s = lead_s
        self.stopped = False
        self._timer: threading.Timer | None = None
        self._handle: ProcessHandle | None = None

    def started(self, handle: ProcessHandle) -> None:
        if self.kill_tool is None or self.timeout_s is None:
            return
        self._handle = handle
        self._timer = threading.Timer(max(0.0, self.timeout_s - self.lead_s), self._stop)
        self._timer.daemon = True
        self._timer.start()

    def _stop(self) -> None:
        self.stopped = True
        self._handle.run_tool([self.kill_tool, f"-{self.signal_name}", str(self._handle.pid)], timeout_s=5.0)

    def finished(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
