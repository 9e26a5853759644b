"""A step's scratch: what its runs write to the worker's disk, capped per run and per step.

A run writes to one host directory, its run directory (its output, the JUnit XML, the
probes' files, a core of each Python process): a docker run can write nowhere else on the
host (docs/guides/security.md). The directory goes once what lagtrace keeps of it is read
(services/measure/screen.py), so a step holds one at a time; what its runs write is capped
all the same, in bytes and in entries (files and directories: a file system runs out of
inodes while its bytes still show room), for each run (LAGTRACE_RUN_DIR_MAX_BYTES,
LAGTRACE_RUN_DIR_MAX_ENTRIES) and summed over the step's runs
(LAGTRACE_STEP_SCRATCH_MAX_BYTES, LAGTRACE_STEP_SCRATCH_MAX_ENTRIES). A run over a cap is
stopped (``ScratchWatch``) and the step fails, counted: ScratchExceeded names the cap and
the setting that raises it (tests/security/test_step_scratch.py).

The account of a step is the one ``stepping`` opens around its handler
(services/jobs/lease.py), whatever executors the step makes (a pull request's base has
its own); outside a step (`lagtrace run`) each executor keeps its own, for the job it runs.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from services.errors import ScratchExceeded
from services.settings import Settings


@dataclass(frozen=True)
class Usage:
    """Disk space (allocated bytes) and entries (files, directories, whatever else)."""

    bytes: int = 0
    entries: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.bytes + other.bytes, self.entries + other.entries)

    def most(self, other: Usage) -> Usage:
        return Usage(max(self.bytes, other.bytes), max(self.entries, other.entries))


def tree_usage(root: Path, stop_after_entries: int | None = None) -> Usage:
    """The disk space the files below ``root`` take (allocated blocks: a sparse file counts
    what it holds) and how many entries there are, links never followed. The walk stops
    once it counted more than ``stop_after_entries``: a run that made a million files is
    over its cap long before the walk would end."""
    return _walk(root, stop_after_entries)[0]


def _walk(root: Path, stop_after_entries: int | None = None) -> tuple[Usage, bool]:
    """tree_usage, and whether a directory below ``root`` could not be listed (a worker
    that is not root meets one a container made mode 0700: what it holds is not seen)."""
    total, entries, pending, closed = 0, 0, [root], False
    while pending:
        try:
            with os.scandir(pending.pop()) as listing:
                for entry in listing:
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += info.st_blocks * 512
                    entries += 1
                    if stat.S_ISDIR(info.st_mode):
                        pending.append(Path(entry.path))
                    if stop_after_entries is not None and entries > stop_after_entries:
                        return Usage(total, entries), closed
        except OSError:
            closed = True
    return Usage(total, entries), closed


@dataclass(frozen=True)
class Cap:
    """What one run may still write, in one unit: its own cap, or what is left of its
    step's where that is less."""

    limit: int
    setting: str
    # The step's cap as set (``limit`` is what its earlier runs left of it); 0: a run's own.
    whole: int = 0


class ScratchAccount:
    """What a step's runs wrote to their run directories: summed over its runs
    (``written``, held against the step's caps) and the most one of them held at once
    (``most_held``, read when a step fails on a short disk: services/jobs/disk.py).
    ``room``: the work directory's free bytes and inodes when the step was taken."""

    def __init__(self, settings: Settings, room: tuple[int, int | None] | None = None):
        self.settings, self.room = settings, room
        self.written, self.most_held, self.runs = Usage(), Usage(), 0

    def caps(self) -> tuple[Cap, Cap]:
        """The caps of the next run, bytes and entries."""
        s = self.settings
        return (
            _cap(s.run_dir_max_bytes, s.step_scratch_max_bytes, self.written.bytes, "BYTES"),
            _cap(s.run_dir_max_entries, s.step_scratch_max_entries, self.written.entries, "ENTRIES"),
        )

    def charge(self, label: str, held: Usage, caps: tuple[Cap, Cap]) -> ScratchExceeded | None:
        """Count what a run's directory held (the most seen) against ``caps``, the ones the
        run started with; the error naming the cap it passed, if it did."""
        self.runs += 1
        self.written += held
        self.most_held = self.most_held.most(held)
        by_bytes, by_entries = caps
        if held.bytes > by_bytes.limit:
            return self._exceeded(label, by_bytes, held.bytes, self.written.bytes, "bytes", "wrote", "to")
        if held.entries > by_entries.limit:
            what = "entries (files and directories)"
            return self._exceeded(label, by_entries, held.entries, self.written.entries, what, "made", "in")
        return None

    def _exceeded(
        self, label: str, cap: Cap, held: int, total: int, what: str, verb: str, where: str
    ) -> ScratchExceeded:
        if not cap.whole:
            return ScratchExceeded(
                f"the run in {label} {verb} {held:,} {what} {where} its run directory, over the cap of "
                f"{cap.limit:,}: {cap.setting} raises it"
            )
        return ScratchExceeded(
            f"the step's runs {verb} {total:,} {what} {where} their run directories in all ({self.runs} runs, "
            f"{held:,} by the run in {label}), over the step's cap of {cap.whole:,}: {cap.setting} raises it"
        )


def _cap(per_run: int, per_step: int, written: int, unit: str) -> Cap:
    if per_run <= per_step - written:
        return Cap(per_run, f"LAGTRACE_RUN_DIR_MAX_{unit}")
    return Cap(max(0, per_step - written), f"LAGTRACE_STEP_SCRATCH_MAX_{unit}", per_step)


_STEP: ContextVar[ScratchAccount | None] = ContextVar("lagtrace_step_scratch", default=None)


@contextmanager
def stepping(account: ScratchAccount) -> Iterator[ScratchAccount]:
    """``account`` is the one every run of this thread counts in until the block ends."""
    token = _STEP.set(account)
    try:
        yield account
    finally:
        _STEP.reset(token)


def account_for(own: ScratchAccount) -> ScratchAccount:
    """The account a run counts in: its step's, else its executor's own (``own``)."""
    step = _STEP.get()
    return own if step is None else step


class ScratchWatch:
    """Stops a run once its run directory holds more than its caps allow, then counts
    what it held in its step's account (``settle``).

    Beside a measured run the host must stay quiet, so each tick is one statvfs of the
    file system; the directory is walked only once its free bytes fell by more than the
    bytes cap, or its free inodes by more than the entries cap, since the last look (what
    others wrote meanwhile is then taken off the baseline). Where the file system counts
    no inodes (btrfs), every UNCOUNTED_WALK_S as well. A directory the walk cannot list
    (a worker that is not root, a container's directory of mode 0700) is counted as all
    the file system lost since the run started: a run that hides what it writes is held
    to what it may have written (tests/security/test_non_root_worker.py)."""

    INTERVAL_S = 0.25
    UNCOUNTED_WALK_S = 2.0

    def __init__(self, run_dir: Path, account: ScratchAccount, label: str):
        self.run_dir, self.account, self.label = run_dir, account, label
        self.caps = account.caps()
        self.seen = Usage()
        self.stopped = False
        self._start: tuple[int, int | None] | None = None
        self._stop_run: Callable[[], None] = lambda: None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, stop: Callable[[], None]) -> None:
        """Watch from now on; ``stop`` kills the run."""
        self._stop_run = stop
        try:
            self._start = self._free()
        except OSError:
            return
        self._thread = threading.Thread(target=self._watch, name="lagtrace-scratch-watch", daemon=True)
        self._thread.start()

    def finish(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ScratchWatch:
        return self

    def __exit__(self, *exc_info) -> None:
        self.finish()

    def settle(self) -> ScratchExceeded | None:
        """Once nothing of the run is left to write: count what its directory held (the
        most seen, or what it holds now: walked whole, as its removal will) in the
        account; the cap it passed, if it did."""
        self.finish()
        held = self._held(None).most(self.seen)
        return self.account.charge(self.label, held, self.caps)

    def _free(self) -> tuple[int, int | None]:
        fs = os.statvfs(self.run_dir)
        return fs.f_bavail * fs.f_frsize, (fs.f_ffree if fs.f_files else None)

    def _held(self, stop_after_entries: int | None) -> Usage:
        held, closed = _walk(self.run_dir, stop_after_entries)
        start = self._start
        if not closed or start is None:
            return held
        try:
            free_bytes, free_inodes = self._free()
        except OSError:
            return held
        lost_inodes = start[1] - free_inodes if start[1] is not None and free_inodes is not None else 0
        return held.most(Usage(start[0] - free_bytes, lost_inodes))

    def _watch(self) -> None:
        by_bytes, by_entries = self.caps
        assert self._start is not None  # start() took it before this thread
        base_bytes, base_inodes = self._start
        walked = time.monotonic()
        while not self._done.wait(self.INTERVAL_S):
            try:
                free_bytes, free_inodes = self._free()
            except OSError:
                return
            due = base_bytes - free_bytes > by_bytes.limit
            if free_inodes is None or base_inodes is None:
                due = due or time.monotonic() - walked >= self.UNCOUNTED_WALK_S
            else:
                due = due or base_inodes - free_inodes > by_entries.limit
            if not due:
                continue
            held = self._held(by_entries.limit)
            walked = time.monotonic()
            self.seen = self.seen.most(held)
            if held.bytes > by_bytes.limit or held.entries > by_entries.limit:
                self.stopped = True
                self._stop_run()
                return
            base_bytes = free_bytes + held.bytes
            base_inodes = None if free_inodes is None else free_inodes + held.entries
