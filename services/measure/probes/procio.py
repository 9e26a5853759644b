"""/proc/<pid>/io: read and write syscall counts and bytes, so a rule can compute the
bytes per read syscall (story 2's 1-byte chunked reads show up as ~1 byte per read).

Read through the ProcessHandle (`cat` beside the command), so it names the pid in the
command's own namespace, also inside a container.
"""

from __future__ import annotations

from services.evidence import EvidenceKind, ProcIoContent
from services.measure.executors.base import Executor, ProcessHandle
from services.measure.probes.base import EvidenceDraft, missing_tool, tool_failure

KIND = EvidenceKind.proc_io
FIELDS = ("rchar", "wchar", "syscr", "syscw", "read_bytes", "write_bytes", "cancelled_write_bytes")


def parse(text: str) -> dict[str, int]:
    counters = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in FIELDS:
            counters[key.strip()] = int(value.strip())
    return counters


def derived(counters: dict[str, int]) -> dict[str, float | None]:
    def per(numerator: str, denominator: str) -> float | None:
        calls = counters.get(denominator)
        return round(counters.get(numerator, 0) / calls, 2) if calls else None

    return {
        "bytes_per_read_syscall": per("rchar", "syscr"),
        "bytes_per_write_syscall": per("wchar", "syscw"),
    }


def read(executor: Executor, handle: ProcessHandle, pid: int, phase: str, elapsed_s: float) -> EvidenceDraft:
    cat = executor.tool_path("cat")
    if cat is None:
        return missing_tool(KIND, "cat", executor)
    result = handle.run_tool([cat, f"/proc/{pid}/io"], timeout_s=5.0)
    if result.returncode != 0:
        return tool_failure(KIND, f"reading /proc/{pid}/io", result, phase=phase)
    counters = parse(result.stdout)
    return EvidenceDraft(
        kind=KIND,
        content=ProcIoContent(
            phase=phase, elapsed_s=round(elapsed_s, 3), pid=pid, counters=counters, **derived(counters)
        ),
        text=result.stdout,
    )
