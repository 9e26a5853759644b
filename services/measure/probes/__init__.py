"""Evidence probes, one module each; every probe runs in its own evidence run.

``--evidence`` names them: strace, pyspy (record), core (the stall snapshot: py-spy
dump, /proc I/O counters, gcore read by gdb), faulthandler, imports (-X importtime),
reads (every read syscall's size, socket reads included) and asyncio_loop (callbacks
that block an asyncio event loop, with the loop thread's stack).
"""

from __future__ import annotations

from services.measure.probes.asyncio_loop import AsyncioLoopProbe
from services.measure.probes.base import EvidenceDraft, Probe, ProbeContext
from services.measure.probes.core import CoreProbe
from services.measure.probes.faulthandler import FaulthandlerProbe
from services.measure.probes.imports import ImportTimeProbe
from services.measure.probes.pyspy import PySpyRecordProbe
from services.measure.probes.reads import ReadSizesProbe
from services.measure.probes.strace import StraceProbe

PROBES: dict[str, type[Probe]] = {
    "strace": StraceProbe,
    "pyspy": PySpyRecordProbe,
    "core": CoreProbe,
    "faulthandler": FaulthandlerProbe,
    "imports": ImportTimeProbe,
    "reads": ReadSizesProbe,
    "asyncio_loop": AsyncioLoopProbe,
}

__all__ = ["PROBES", "EvidenceDraft", "Probe", "ProbeContext"]
