"""imports: where a Python command's start-up goes, from `-X importtime`.

PYTHONPROFILEIMPORTTIME makes every interpreter the command starts report each import
on stderr; the command's stderr is sent to a file in the run directory (through `sh`,
which every runner image has) and the top-level imports are summed.
"""

from __future__ import annotations

import re

from services.evidence import EvidenceKind, ImportsContent
from services.measure.executors.base import RunResult
from services.measure.probes.base import EvidenceDraft, Probe, missing_tool, unavailable

KIND = EvidenceKind.imports
STDERR_FILE = "importtime.txt"
TOP = 10

# "import time:       123 |       4567 |   package.module"
_LINE = re.compile(r"^import time:\s+(?P<self>\d+) \|\s+(?P<cumulative>\d+) \|(?P<indent> *)(?P<module>\S+)\s*$")


def parse(text: str) -> tuple[float, list[dict]]:
    """Total seconds spent in top-level imports, and the slowest of them."""
    top_level: list[dict] = []
    for line in text.splitlines():
        match = _LINE.match(line)
        if match and len(match["indent"]) == 1:  # one space after '|': imported by the program itself
            top_level.append(
                {
                    "module": match["module"],
                    "cumulative_s": int(match["cumulative"]) / 1e6,
                    "self_s": int(match["self"]) / 1e6,
                }
            )
    total = sum(entry["cumulative_s"] for entry in top_level)
    return total, sorted(top_level, key=lambda entry: entry["cumulative_s"], reverse=True)[:TOP]


class ImportTimeProbe(Probe):
    name = KIND.value
    kind = KIND

    def __init__(self, context):
        super().__init__(context)
        self.shell = context.executor.tool_path("sh")

    def unavailable(self) -> EvidenceDraft | None:
        return missing_tool(KIND, "sh", self.context.executor) if self.shell is None else None

    def command(self, command: list[str]) -> list[str]:
        return [self.shell, "-c", 'exec "$@" 2>"$0"', self.visible(STDERR_FILE), *command]

    def env(self) -> dict[str, str]:
        return {"PYTHONPROFILEIMPORTTIME": "1"}

    def collect(self, result: RunResult) -> list[EvidenceDraft]:
        path = self.context.run_dir / STDERR_FILE
        text = path.read_text(errors="replace") if path.exists() else ""
        total, slowest = parse(text)
        if not slowest:
            return [unavailable(KIND, "no import timings were printed: the command does not look like Python")]
        return [
            EvidenceDraft(
                kind=KIND,
                content=ImportsContent.model_validate(
                    {"total_import_s": total, "slowest": slowest, "wall_s": result.wall_s}
                ),
                text="\n".join(line for line in text.splitlines() if line.startswith("import time:"))[-200_000:],
            )
        ]
