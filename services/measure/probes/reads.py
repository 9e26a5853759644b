"""reads: every read syscall's size and what it read from (socket, pipe or file).

`strace -c` counts calls but not bytes, and /proc/PID/io does not count socket reads at
all (`recv`, `recvfrom`, `recvmsg` are missing from syscr; docs/explanations/design.md). This
probe traces only the read family (`--seccomp-bpf` leaves every other syscall
untraced and free), with `-y` to name each descriptor and `-s 0` to print no data,
and keeps a size histogram per descriptor type, so a rule can judge the typical read
(median and mode), which a few large reads cannot hide the way they hide in a mean.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from pathlib import Path

from services.evidence import EvidenceKind, ReadsContent
from services.measure.executors.base import RunResult
from services.measure.probes.base import DENIED, FAILED, EvidenceDraft, TracerProbe, unavailable

KIND = EvidenceKind.reads
TRACE_FILE = "reads-trace.txt"
READ_SYSCALLS = ("read", "readv", "pread64", "preadv", "preadv2", "recv", "recvfrom", "recvmsg")
# Upper bounds of the size buckets the evidence keeps (bytes); the last bucket is open.
BUCKETS = (0, 1, 16, 64, 512, 4096, 65536)
SAMPLE_LINES = 40

# "1234  recvfrom(3<socket:[5678]>, ""..., 1, 0, NULL, NULL) = 1" (pid prefix with -f)
_CALL = re.compile(r"^(?:\[pid\s+)?(?P<pid>\d+)?\]?\s*(?P<name>\w+)\((?P<fd>\d+)(?:<(?P<desc>[^>]*)>)?")
_UNFINISHED = re.compile(r"<unfinished \.\.\.>\s*$")
_RESUMED = re.compile(r"^(?:\[pid\s+)?(?P<pid>\d+)?\]?\s*<\.\.\. (?P<name>\w+) resumed>")
_RESULT = re.compile(r"\)\s+=\s+(?P<ret>-?\d+)(?:\s+(?P<errno>E[A-Z]+))?")


def fd_type(desc: str | None) -> str:
    if not desc:
        return "unknown"
    if desc.startswith(("socket:", "TCP", "UDP", "UNIX", "TCPv6", "UDPv6", "NETLINK")):
        return "socket"
    if desc.startswith("pipe:"):
        return "pipe"
    if desc.startswith("/"):
        return "file"
    return "other"


def bucket(size: int) -> str:
    for bound in BUCKETS:
        if size <= bound:
            return f"<={bound}"
    return f">{BUCKETS[-1]}"


def parse(lines) -> dict[str, dict]:
    """Per descriptor type: calls, bytes, errors, EOF reads, and the sizes' median, mode
    and histogram (successful non-empty reads)."""
    sizes: dict[str, Counter] = {}
    errors: Counter = Counter()
    eofs: Counter = Counter()
    syscalls: dict[str, Counter] = {}
    pending: dict[str | None, tuple[str, str]] = {}
    for line in lines:
        resumed = _RESUMED.match(line)
        if resumed:
            name, kind = pending.pop(resumed["pid"], (resumed["name"], "unknown"))
        else:
            call = _CALL.match(line)
            if not call or call["name"] not in READ_SYSCALLS:
                continue
            name, kind = call["name"], fd_type(call["desc"])
            if _UNFINISHED.search(line):
                pending[call["pid"]] = (name, kind)
                continue
        result = _RESULT.search(line)
        if result is None:
            continue
        syscalls.setdefault(kind, Counter())[name] += 1
        ret = int(result["ret"])
        if ret < 0:
            errors[kind] += 1
        elif ret == 0:
            eofs[kind] += 1
        else:
            sizes.setdefault(kind, Counter())[ret] += 1
    summary = {}
    for kind in set(syscalls):
        counted = sizes.get(kind, Counter())
        reads = sum(counted.values())
        histogram: Counter = Counter()
        for size, count in counted.items():
            histogram[bucket(size)] += count
        summary[kind] = {
            "calls": sum(syscalls[kind].values()),
            "syscalls": dict(syscalls[kind]),
            "reads_with_data": reads,
            "bytes": sum(size * count for size, count in counted.items()),
            "errors": errors[kind],
            "eof": eofs[kind],
            "median_bytes": _median(counted) if reads else None,
            "mode_bytes": counted.most_common(1)[0][0] if reads else None,
            "mean_bytes": round(sum(size * count for size, count in counted.items()) / reads, 1) if reads else None,
            "histogram": {label: histogram[label] for label in _labels() if histogram[label]},
        }
    return summary


def _labels() -> list[str]:
    return [f"<={bound}" for bound in BUCKETS] + [f">{BUCKETS[-1]}"]


def _median(counted: Counter) -> float:
    """The median of a size -> count histogram without expanding it (300,000 reads)."""
    total = sum(counted.values())
    ordered = sorted(counted.items())
    if total % 2:
        return float(_nth(ordered, total // 2))
    return statistics.fmean((_nth(ordered, total // 2 - 1), _nth(ordered, total // 2)))


def _nth(ordered: list[tuple[int, int]], index: int) -> int:
    seen = 0
    for size, count in ordered:
        seen += count
        if index < seen:
            return size
    return ordered[-1][0]


class ReadSizesProbe(TracerProbe):
    name = KIND.value
    kind = KIND
    tool = "strace"
    stop_signal = "TERM"
    # What strace traces, and where it writes (the census traces more: probes/census.py).
    traced: tuple[str, ...] = READ_SYSCALLS
    trace_file = TRACE_FILE

    def command(self, command: list[str]) -> list[str]:
        # -qq: no attach/exit chatter; -e signal=none: no signal lines; -I 2 lets the
        # watcher's SIGTERM through before the hard timeout (see strace.py).
        assert self.tool_path is not None  # unavailable() said so otherwise
        return [
            self.tool_path,
            "-f",
            "-qq",
            "-y",
            "-s",
            "0",
            "--seccomp-bpf",
            "-e",
            "trace=" + ",".join(self.traced),
            "-e",
            "signal=none",
            "-I",
            "2",
            "-o",
            self.visible(self.trace_file),
            "--",
            *command,
        ]

    def collect(self, result: RunResult) -> list[EvidenceDraft]:
        path: Path = self.context.run_dir / TRACE_FILE
        if not path.exists():
            reason = "strace wrote no trace of read syscalls"
            if result.output_tail:
                reason += ": " + " / ".join(result.output_tail.strip().splitlines()[-3:])
            return [unavailable(KIND, reason, DENIED if "ptrace" in (result.output_tail or "") else FAILED)]
        with path.open(errors="replace") as handle:
            by_type = parse(handle)
        with path.open(errors="replace") as handle:
            sample = "".join(line for _, line in zip(range(SAMPLE_LINES), handle, strict=False))
        return [
            EvidenceDraft(
                kind=KIND,
                content=ReadsContent.model_validate(
                    {
                        "by_fd_type": by_type,
                        "wall_s": result.wall_s,
                        "timed_out": result.timed_out,
                        "stopped_before_timeout": self.stopped_before_timeout,
                    }
                ),
                text=sample,
            )
        ]
