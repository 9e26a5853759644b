"""tiny_reads: huge numbers of read syscalls that each bring a few bytes.

DESIGN.md story 2: a "CPU-bound" parser was really reading a response body in 1-byte
chunks. Every timing run records the command's read syscalls and bytes from /proc io
(no tracer needed); strace rows are cited when a drill traced the command.
"""

from __future__ import annotations

import statistics

from services.diagnose.context import RuleContext
from services.diagnose.findings import FindingDraft, Severity

READ_SYSCALLS = frozenset({"read", "readv", "pread64", "preadv", "preadv2", "recvfrom", "recv", "recvmsg"})


def check(context: RuleContext) -> list[FindingDraft]:
    limits = context.thresholds
    worst = None
    for config in context.job.configs:
        runs = [run for run in context.timing_runs(config) if run.read_syscalls]
        if not runs:
            continue
        syscalls = statistics.median(run.read_syscalls for run in runs)
        per_read = statistics.median(run.read_bytes / run.read_syscalls for run in runs)
        tiny = syscalls >= limits.tiny_reads_min_syscalls and per_read <= limits.tiny_reads_max_avg_bytes
        if tiny and (worst is None or per_read < worst[2]):
            worst = (config, syscalls, per_read, runs)
    if worst is None:
        return []
    config, syscalls, per_read, runs = worst
    wall = statistics.median(run.wall_s for run in runs)
    traced = [e for e in context.evidence("strace") if e.test_id is None]
    rows = [row for e in traced[:1] for row in e.content.get("syscalls", []) if row["name"] in READ_SYSCALLS]
    detail = (
        f"/proc io with {config.label}: a median of {syscalls:.0f} read syscalls per run averaging "
        f"{per_read:.1f} bytes each (start-up reads included), in {wall:.3f} s"
    )
    if rows:
        detail += "; strace -f -c: " + ", ".join(f"{r['name']} {r['calls']} calls {r['seconds']:.3f} s" for r in rows)
    detail += ". Read in larger chunks (buffered I/O, iter_content(chunk_size=64 KiB), read whole bodies)"
    return [
        FindingDraft(
            kind="tiny_reads",
            severity=Severity.medium if per_read <= 64 else Severity.low,
            title=f"{syscalls:.0f} read syscalls per run of {per_read:.0f} bytes on average",
            detail=detail,
            config_label=config.label,
            metrics={"read_syscalls": syscalls, "bytes_per_read": per_read, "median_wall_s": wall},
            evidence_ids=[e.id for e in traced[:1]],
        )
    ]
