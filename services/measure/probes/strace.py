"""`strace -f -c`: which syscalls the command (and every thread and child) spent its
kernel time in. A futex-dominated table is the signature of threads handing work to
each other (docs/explanations/design.md, story 1); huge counts of tiny reads point at I/O patterns (story 2).
"""

from __future__ import annotations

import re

from services.evidence import EvidenceKind, StraceContent
from services.measure.executors.base import RunResult
from services.measure.probes.base import DENIED, FAILED, EvidenceDraft, TracerProbe, unavailable

KIND = EvidenceKind.strace
SUMMARY_FILE = "strace-summary.txt"

# "% time     seconds  usecs/call     calls    errors syscall" rows; errors may be blank.
_ROW = re.compile(
    r"^\s*(?P<pct>\d+(?:\.\d+)?)\s+(?P<seconds>\d+(?:\.\d+)?)\s+(?P<usecs>\d+)\s+"
    r"(?P<calls>\d+)\s+(?:(?P<errors>\d+)\s+)?(?P<name>\S+)\s*$"
)


def parse_summary(text: str) -> tuple[list[dict], dict | None]:
    """The syscall rows (in strace's order: most time first) and the `total` row."""
    rows: list[dict] = []
    total = None
    for line in text.splitlines():
        match = _ROW.match(line)
        if not match:
            continue
        row = {
            "name": match["name"],
            "pct_time": float(match["pct"]),
            "seconds": float(match["seconds"]),
            "usecs_per_call": int(match["usecs"]),
            "calls": int(match["calls"]),
            "errors": int(match["errors"] or 0),
        }
        if row["name"] == "total":
            total = row
        else:
            rows.append(row)
    return rows, total


class StraceProbe(TracerProbe):
    name = KIND.value
    kind = KIND
    tool = "strace"
    stop_signal = "TERM"

    def command(self, command: list[str]) -> list[str]:
        # -c counts system time per syscall (strace's default, what story 1 read);
        # -f follows threads and children, where the futex traffic is. -I 2 lets SIGTERM
        # through (strace blocks it by default with -o FILE PROG), which the watcher
        # sends before the hard timeout so a stalled run still gets its summary.
        return [self.found_tool, "-f", "-c", "-I", "2", "-o", self.visible(SUMMARY_FILE), "--", *command]

    def collect(self, result: RunResult) -> list[EvidenceDraft]:
        path = self.context.run_dir / SUMMARY_FILE
        text = path.read_text(errors="replace") if path.exists() else ""
        rows, total = parse_summary(text)
        if not rows:
            # strace prints its own failure (ptrace denied, bad option) into the command's
            # output, which the run keeps only as its tail.
            reason = "strace wrote no syscall summary"
            if result.output_tail:
                reason += ": " + " / ".join(result.output_tail.strip().splitlines()[-3:])
            status = DENIED if "ptrace" in (result.output_tail or "") else FAILED
            return [unavailable(KIND, reason, status)]
        top = rows[0]
        return [
            EvidenceDraft(
                kind=KIND,
                content=StraceContent.model_validate(
                    {
                        "syscalls": rows,
                        "total": total,
                        "top": top["name"],
                        "top_pct_time": top["pct_time"],
                        "timed_out": result.timed_out,
                        "stopped_before_timeout": self.stopped_before_timeout,
                    }
                ),
                text=text,
            )
        ]
