"""tiny_reads: huge numbers of read syscalls that each bring a few bytes.

docs/explanations/design.md, story 2: a "CPU-bound" parser was really reading a response body in 1-byte
chunks. Two sources:

- the reads probe (a drill's strace of every read, with its size and descriptor type)
  judges the typical read: the median and the mode per descriptor type, which a few
  large reads (module loading, a final big chunk) cannot hide the way they hide in a
  mean; it is the only source that sees socket reads (`recv`, `recvfrom`);
- before a drill, the timing runs' /proc io counters (file and pipe reads only; their
  mean includes start-up reads) flag the command so the drill traces it.

A count is no cost (docs/reference/findings.md): a client reading 2,000 messages of 38 bytes that a peer
sends over 4 s reads each as it comes, and a bigger buffer would save nothing. The
finding is medium only where the reads cost time: the system time strace -c measured in
the read syscalls, in the same configuration, against the untraced run's median
(``tiny_reads_min_cost_s``, ``tiny_reads_min_share``); otherwise it is a low note.
"""

from __future__ import annotations

import statistics

from services.diagnose.context import RuleContext, subject, where
from services.diagnose.findings import FindingDraft, Severity
from services.diagnose.metrics import TinyReadsCountedMetrics, TinyReadsTracedMetrics
from services.evidence import FdTypeReads, ReadsContent, StraceContent
from services.measure.probes.reads import READ_SYSCALLS
from services.models import Evidence

ADVICE = (
    "Read in larger chunks: a buffered reader (io.BufferedReader, socket.makefile), "
    "recv(65536), iter_content(chunk_size=65536), or the whole body at once"
)


def check(context: RuleContext) -> list[FindingDraft]:
    """Each drilled subject's reads (the whole command, or a test drilled alone: a census
    may have sent it on); the /proc io screen where the whole command's were not traced."""
    found = []
    subjects = list(dict.fromkeys(e.test_id for e, _ in context.evidence_of(ReadsContent)))
    for test_id in subjects:
        found += _from_reads(context, test_id)
    if None not in subjects:
        found += _from_proc_io(context)
    return found


def _from_reads(context: RuleContext, test_id: str | None) -> list[FindingDraft]:
    """The verdict on one subject's reads evidence."""
    limits = context.thresholds
    evidence = [(e, c) for e, c in context.evidence_of(ReadsContent) if e.test_id == test_id]
    worst: tuple[Evidence, ReadsContent, str, FdTypeReads] | None = None
    for entry, content in evidence:
        for fd_type, row in (content.by_fd_type or {}).items():
            median = row.median_bytes
            if median is None or row.reads_with_data < limits.tiny_reads_min_syscalls:
                continue
            if median > limits.tiny_reads_max_bytes:
                continue
            if worst is None or row.reads_with_data > worst[3].reads_with_data:
                worst = (entry, content, fd_type, row)
    if worst is None:
        return []
    entry, content, fd_type, row = worst
    reads, median, mode = row.reads_with_data, row.median_bytes or 0.0, row.mode_bytes
    syscalls = ", ".join(f"{name} {count}" for name, count in sorted(row.syscalls.items()))
    histogram = ", ".join(f"{label} bytes: {count}" for label, count in row.histogram.items())
    wall = content.wall_s or 0.0
    cost, costs, accounts = _cost(context, entry)
    # Tracing every read costs ~90 us each: a long loop of them meets the evidence timeout,
    # and the counts then cover the run up to the tracer's stop.
    partial = " (stopped before the timeout: counts up to then)" if content.stopped_before_timeout else ""
    return [
        FindingDraft(
            kind="tiny_reads",
            severity=Severity.medium if costs else Severity.low,
            title=f"{subject(test_id)}: {reads} {fd_type} reads of typically {median:.0f} bytes"
            if test_id
            else f"{reads} {fd_type} reads of typically {median:.0f} bytes",
            test_id=test_id,
            detail=(
                f"strace of every read ({where(entry)}): {reads} {fd_type} reads brought data ({syscalls}), "
                f"median {median:.0f} bytes, most often {mode} bytes, {row.bytes} bytes in all"
                f"{f' in a {wall:.2f} s traced run' if wall else ''}{partial}; sizes: {histogram}. {cost}{ADVICE}"
            ),
            config_label=entry.config.label if entry.config else None,
            metrics=TinyReadsTracedMetrics(
                accounts_s=accounts,
                fd_type=fd_type,
                reads=reads,
                median_bytes=median,
                mode_bytes=mode,
                mean_bytes=row.mean_bytes,
                bytes=row.bytes,
                histogram=row.histogram,
            ),
            evidence_ids=[entry.id],
        )
    ]


def _cost(context: RuleContext, reads: Evidence) -> tuple[str, bool, float | None]:
    """What the read syscalls cost, said, whether that is enough for a medium finding
    (their system time in the strace -c evidence of the same configuration and test,
    against the untraced median), and the seconds of one run they account for (None:
    not measured)."""
    limits = context.thresholds
    label = reads.config.label if reads.config else None
    median = context.timing_median(label, reads.test_id) if label else None
    for entry, content in context.evidence_of(StraceContent):
        if entry.config is not reads.config or entry.test_id != reads.test_id or not content.syscalls:
            continue
        seconds = sum(row.seconds for row in content.syscalls if row.name in READ_SYSCALLS)
        # Per run of a test repeated in its evidence run (probes/amplify.py), no more than
        # the untraced run lasts.
        per_run = seconds / (content.run.iterations if content.run else 1)
        accounts = min(per_run, median) if median else per_run
        if not median:
            return f"The read syscalls took {seconds:.3f} s of system time (strace -c). ", False, accounts
        share = seconds / median
        costs = seconds >= limits.tiny_reads_min_cost_s and share >= limits.tiny_reads_min_share
        said = (
            f"The read syscalls took {seconds:.3f} s of system time (strace -c), {share:.0%} of the "
            f"{median:.3f} s untraced median"
        )
        return (said + (". " if costs else ": too little to be worth a larger buffer. ")), costs, accounts
    return "What the reads cost was not measured (no strace -c in this configuration). ", False, None


def _from_proc_io(context: RuleContext) -> list[FindingDraft]:
    limits = context.thresholds
    worst = None
    for config in context.job.configs:
        # The executors record both counters or neither (/proc io's syscr and rchar).
        counted = [
            (run, run.read_syscalls, run.read_bytes)
            for run in context.timing_runs(config)
            if run.read_syscalls and run.read_bytes is not None
        ]
        if not counted:
            continue
        runs = [run for run, _, _ in counted]
        syscalls = statistics.median(reads for _, reads, _ in counted)
        per_read = statistics.median(read_bytes / reads for _, reads, read_bytes in counted)
        tiny = syscalls >= limits.tiny_reads_min_syscalls and per_read <= limits.tiny_reads_max_avg_bytes
        if tiny and (worst is None or per_read < worst[2]):
            worst = (config, syscalls, per_read, runs)
    if worst is None:
        return []
    config, syscalls, per_read, runs = worst
    wall = statistics.median(run.wall_s for run in runs)
    return [
        FindingDraft(
            kind="tiny_reads",
            # A mean over start-up reads too: a pointer for the drill, not yet a diagnosis.
            severity=Severity.low,
            title=f"{syscalls:.0f} read syscalls per run of {per_read:.0f} bytes on average",
            detail=(
                f"/proc io with {config.label}: a median of {syscalls:.0f} read syscalls per run (files and pipes) "
                f"averaging {per_read:.1f} bytes each (start-up reads included; socket reads are not counted "
                f"there), in {wall:.3f} s; the reads probe gives their typical size. {ADVICE}"
            ),
            config_label=config.label,
            metrics=TinyReadsCountedMetrics(read_syscalls=syscalls, bytes_per_read=per_read, median_wall_s=wall),
        )
    ]
