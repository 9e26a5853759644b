"""Rendering the chart with the real Helm (built from source by .ci/helm.sh)."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, provisioned, require

CHART = REPO / "charts" / "lagtrace"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
# The default values and every CI values file: what `.ci/` lints and validates.
VALUE_SETS = [None, *CI_VALUES]


def value_set_id(path: Path | None) -> str:
    return "default" if path is None else path.stem


@pytest.fixture(scope="session")
def helm() -> str:
    # LAGTRACE_HELM, a helm on the PATH, else the pinned version built by .ci/provision-chart.sh.
    found = os.environ.get("LAGTRACE_HELM") or shutil.which("helm") or provisioned("helm", "LAGTRACE_HELM")
    require(os.access(found, os.X_OK), f"LAGTRACE_HELM={found} is not an executable")
    return found


@dataclass
class Rendered:
    objects: list[dict[str, Any]]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str, name_suffix: str) -> dict[str, Any]:
        found = [o for o in self.of_kind(kind) if o["metadata"]["name"].endswith(name_suffix)]
        assert len(found) == 1, f"{kind} *{name_suffix}: {[o['metadata']['name'] for o in self.of_kind(kind)]}"
        return found[0]

    def workloads(self) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] in ("Deployment", "StatefulSet", "Job")]


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


def all_containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod_spec(workload)
    return [*spec.get("initContainers", []), *spec["containers"]]


def long_running_containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    """Containers that run for the pod's life: the main ones and native sidecars."""
    spec = pod_spec(workload)
    sidecars = [c for c in spec.get("initContainers", []) if c.get("restartPolicy") == "Always"]
    return [*sidecars, *spec["containers"]]


def run_helm(helm: str, *args: str, chart: Path = CHART) -> subprocess.CompletedProcess:
    return subprocess.run([helm, *args], cwd=chart, capture_output=True, text=True, timeout=120)


def render(helm: str, values: Path | None = None, *extra: str, chart: Path = CHART) -> Rendered:
    args = ["template", "rel", str(chart), "--namespace", "ci"]
    if values is not None:
        args += ["-f", str(values)]
    done = run_helm(helm, *args, *extra, chart=chart)
    assert done.returncode == 0, done.stderr
    return Rendered([o for o in yaml.safe_load_all(done.stdout) if o])
