"""Helpers of the probe tests: they run the real tools on small real programs, through
the local executor (a module of its own: test modules import it by name)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from services.measure.configs import CpuConfig
from services.measure.executors.base import RunRequest
from services.measure.executors.local import LocalExecutor
from services.measure.probes import PROBES, ProbeContext
from services.settings import Settings

REPO = Path(__file__).resolve().parents[4]
HANDOFF = REPO / "examples" / "handoff.py"
BOTH_CORES = CpuConfig("cpuset=0-1", cpuset=(0, 1))


def require_tool(executor: LocalExecutor, name: str) -> str:
    """The tool's path; a missing tool fails the test in CI and skips it elsewhere."""
    path = executor.tool_path(name)
    if path is None:
        message = f"{name} is not installed (Debian package list: .ci/apt-packages.evidence.txt)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


class WithoutTools(LocalExecutor):
    """The local executor on a host where some tools are missing (None) or broken (a path
    that does not exist): the way a bare runner image looks to the probes."""

    def __init__(self, settings: Settings, missing: dict[str, str | None]):
        super().__init__(settings)
        self.missing = missing

    def tool_path(self, name: str) -> str | None:
        if name in self.missing:
            return self.missing[name]
        return super().tool_path(name)


def python_program(tmp_path: Path, source: str, name: str = "program.py") -> list[str]:
    path = tmp_path / name
    path.write_text(source)
    return [sys.executable, str(path)]


def run_probe(
    executor,
    probe_name: str,
    command: list[str],
    run_dir: Path,
    *,
    stall_after_s: float = 1.0,
    timeout_s: float | None = 10.0,
    config: CpuConfig = BOTH_CORES,
    **probe_options,
):
    """One evidence run of one probe; returns (probe, result, drafts by kind)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    context = ProbeContext(executor, run_dir, stall_after_s, timeout_s, last_snapshot_lead_s=1.0)
    probe = PROBES[probe_name](context, **probe_options)
    missing = probe.unavailable()
    if missing is not None:
        return probe, None, {missing.kind: missing}
    result = executor.run(
        RunRequest(
            command=probe.command(command),
            workdir=run_dir,
            config=config,
            run_dir=run_dir,
            timeout_s=timeout_s,
            env=probe.env(),
            watcher=probe.watcher(),
        )
    )
    drafts = {}
    for draft in probe.collect(result):
        drafts.setdefault(draft.kind, draft)
    return probe, result, drafts


def handoff(round_trips: int) -> list[str]:
    return [sys.executable, str(HANDOFF), str(round_trips)]
