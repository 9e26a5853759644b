"""Evidence probes, one module each; every probe runs in its own evidence run.

``--evidence`` names them: strace, pyspy (record), core (the stall snapshot: py-spy
dump, /proc I/O counters, gcore read by gdb), faulthandler and imports (-X importtime).
"""

from __future__ import annotations

from services.measure.probes.base import EvidenceDraft, Probe, ProbeContext
from services.measure.probes.core import CoreProbe
from services.measure.probes.faulthandler import FaulthandlerProbe
from services.measure.probes.imports import ImportTimeProbe
from services.measure.probes.pyspy import PySpyRecordProbe
from services.measure.probes.strace import StraceProbe

PROBES: dict[str, type[Probe]] = {
    "strace": StraceProbe,
    "pyspy": PySpyRecordProbe,
    "core": CoreProbe,
    "faulthandler": FaulthandlerProbe,
    "imports": ImportTimeProbe,
}

__all__ = ["PROBES", "EvidenceDraft", "Probe", "ProbeContext"]
