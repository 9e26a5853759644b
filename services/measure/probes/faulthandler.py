"""faulthandler: the interpreter itself writes every thread's traceback when the stall
threshold passes, with no debugger attached and no edit to the user's code.

The run gets PYTHONFAULTHANDLER=1 (crash tracebacks) and a directory on PYTHONPATH
whose sitecustomize.py arms `faulthandler.dump_traceback_later(stall_after)`, writing
to a file per process under the run directory. The shadowed sitecustomize (Debian
ships one) is still imported afterwards.
"""

from __future__ import annotations

import re

from services.evidence import EvidenceKind, FaulthandlerContent
from services.measure.executors.base import RunResult
from services.measure.probes.base import NO_STALL, EvidenceDraft, Probe, unavailable
from services.measure.probes.hooks import install_hook

KIND = EvidenceKind.faulthandler
HOOK_DIR = "faulthandler-hook"
OUTPUT_PREFIX = "faulthandler"

SITECUSTOMIZE = '''\
"""Installed by lagtrace for one evidence run: dump every thread's traceback at the stall."""
import faulthandler
import os
import sys

_after = float(os.environ["LAGTRACE_FAULTHANDLER_AFTER"])
_path = "%s.%d.txt" % (os.environ["LAGTRACE_FAULTHANDLER_PREFIX"], os.getpid())
# Kept open for the life of the process: faulthandler writes to the raw descriptor.
_file = open(_path, "w")
faulthandler.enable(file=_file, all_threads=True)
faulthandler.dump_traceback_later(_after, repeat=False, file=_file, exit=False)
'''

_THREAD = re.compile(r"^(?P<current>Current thread|Thread) (?P<id>0x[0-9a-f]+) \(most recent call first\):")
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]*)", line (?P<line>\d+) in (?P<function>.*)$')


def parse(text: str) -> list[dict]:
    threads: list[dict] = []
    for line in text.splitlines():
        thread = _THREAD.match(line)
        if thread:
            threads.append({"id": thread["id"], "current": thread["current"] == "Current thread", "frames": []})
            continue
        frame = _FRAME.match(line)
        if frame and threads:
            threads[-1]["frames"].append(
                {"function": frame["function"].strip(), "file": frame["file"], "line": int(frame["line"])}
            )
    return threads


class FaulthandlerProbe(Probe):
    name = KIND.value
    kind = KIND

    def env(self) -> dict[str, str]:
        return {
            **install_hook(self.context.run_dir / HOOK_DIR, self.visible(HOOK_DIR), SITECUSTOMIZE),
            "PYTHONFAULTHANDLER": "1",
            "LAGTRACE_FAULTHANDLER_AFTER": f"{self.context.stall_after_s:.3f}",
            "LAGTRACE_FAULTHANDLER_PREFIX": self.visible(OUTPUT_PREFIX),
        }

    def collect(self, result: RunResult) -> list[EvidenceDraft]:
        outputs = sorted(self.context.run_dir.glob(f"{OUTPUT_PREFIX}.*.txt"))
        if not outputs:
            return [
                unavailable(
                    KIND,
                    "no Python process loaded the faulthandler hook (not a Python command, or it "
                    "runs with -I/-S, which ignore PYTHONPATH and sitecustomize)",
                )
            ]
        drafts = []
        for path in outputs:
            text = path.read_text(errors="replace")
            pid = int(path.name.split(".")[1])
            threads = parse(text)
            if not threads:
                drafts.append(
                    unavailable(
                        KIND,
                        f"the run ended after {result.wall_s:.3f} s, before the stall threshold of "
                        f"{self.context.stall_after_s:.3f} s: no traceback was due",
                        NO_STALL,
                        pid=pid,
                        stall_after_s=self.context.stall_after_s,
                    )
                )
                continue
            drafts.append(
                EvidenceDraft(
                    kind=KIND,
                    content=FaulthandlerContent.model_validate(
                        {
                            "pid": pid,
                            # faulthandler also writes here when the process crashes (SIGSEGV...).
                            "trigger": "crash" if "Fatal Python error" in text else "stall",
                            "stall_after_s": self.context.stall_after_s,
                            "threads": threads,
                        }
                    ),
                    text=text,
                )
            )
        # A process tree where only some processes stalled: the stalled ones are the evidence.
        stalled = [d for d in drafts if d.status == "ok"]
        return stalled or drafts[:1]
