"""How service steps reach a worker: the Step message, and the in-process queue.

The broker-backed dispatcher lives in worker/ (Celery); this one runs steps in a
background thread of `lagtrace serve` when no broker is configured (the embedded
default). Both carry only ids: the database is the record. Nothing calls ``send`` but
the outbox (services.jobs.outbox), once the transaction that recorded a step committed.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger("lagtrace.dispatch")

PREPARE, SCREEN, FINISH, NOTIFY, RECONCILE = "prepare", "screen", "finish", "notify", "reconcile"
# A bisect job's one step (services/jobs/bisect_step.py): fetch, search, measure.
BISECT = "bisect"
STEPS = (PREPARE, SCREEN, FINISH, BISECT, NOTIFY)


@dataclass(frozen=True)
class Step:
    kind: str  # one of STEPS
    job_id: int
    task_name: str  # the JobTask ledger entry this message is for


class Dispatcher(Protocol):
    def send(self, step: Step) -> None:
        """Queue the step. Called only after the transaction that recorded it committed."""

    def problem(self) -> str | None:
        """None when steps can be queued now; otherwise why not (for /readyz)."""


class InProcessDispatcher:
    """One background thread running steps in order: one measured run at a time."""

    def __init__(self, run_step: Callable[[Step], None]):
        self._run_step = run_step
        self._queue: queue.Queue[Step | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="lagtrace-jobs", daemon=True)

    def start(self) -> InProcessDispatcher:
        self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    def send(self, step: Step) -> None:
        self._queue.put(step)

    def problem(self) -> str | None:
        return None if self._thread.is_alive() else "the in-process job thread is not running"

    def _loop(self) -> None:
        while (step := self._queue.get()) is not None:
            try:
                self._run_step(step)
            except Exception:
                # The step recorded its failure in the database; keep serving the others.
                log.exception("step %s of job %s failed", step.task_name, step.job_id)
