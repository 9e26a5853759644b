"""CPU configurations: parsing and validating ``--config`` SPECs such as ``cpus=0.5,cpuset=0``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from services.errors import BadInput

if TYPE_CHECKING:
    from services.models import JobConfig

KEYS = ("cpus", "cpuset")


@dataclass(frozen=True)
class CpuConfig:
    label: str  # the SPEC as the user wrote it: it names the configuration everywhere
    cpus: float | None = None  # CFS quota in CPUs
    cpuset: tuple[int, ...] | None = None  # CPUs the run is pinned to

    @property
    def cpuset_text(self) -> str | None:
        return format_cpulist(self.cpuset) if self.cpuset is not None else None

    @property
    def effective_cpus(self) -> float:
        """How much CPU the run can use at most, for sizing and ordering configurations."""
        limits = [float(len(self.cpuset))] if self.cpuset else []
        if self.cpus is not None:
            limits.append(self.cpus)
        return min(limits) if limits else math.inf


def parse_cpulist(text: str) -> tuple[int, ...]:
    """Parse the kernel's list format: ``0``, ``0-1``, ``0,2-3``."""
    cpus: set[int] = set()
    for raw_part in text.split(","):
        part = raw_part.strip()
        if not part:
            raise BadInput(f"cpuset={text!r}: empty element in the CPU list")
        low, sep, high = part.partition("-")
        try:
            first, last = int(low), int(high) if sep else int(low)
        except ValueError:
            raise BadInput(f"cpuset={text!r}: {part!r} is not a CPU number or range (write 0, 0-1 or 0,2-3)") from None
        if first < 0 or last < first:
            raise BadInput(f"cpuset={text!r}: {part!r} is not a valid range")
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus))


def format_cpulist(cpus: tuple[int, ...] | list[int] | set[int]) -> str:
    ordered = sorted(cpus)
    ranges: list[str] = []
    start: int | None = None
    prev = -2
    for cpu in ordered:
        if start is None:
            start = prev = cpu
        elif cpu == prev + 1:
            prev = cpu
        else:
            ranges.append(f"{start}-{prev}" if prev != start else str(start))
            start = prev = cpu
    if start is not None:
        ranges.append(f"{start}-{prev}" if prev != start else str(start))
    return ",".join(ranges)


def parse_spec(spec: str, available_cpus: tuple[int, ...], machine: str = "this machine") -> CpuConfig:
    """Turn one SPEC into a CpuConfig, checking it against the CPUs this executor has.

    Messages name the configuration, not a CLI flag: a service job's author never typed
    ``--config``; ``machine`` says where the CPUs were counted (a worker, this machine)."""
    spec = spec.strip()
    if not spec:
        raise BadInput("empty --config: write key=value[,key=value] with keys cpus and cpuset")
    values: dict[str, str] = {}
    # cpuset lists use commas too (0,2-3): a comma starts a new key only when a '=' follows.
    current: str | None = None
    for piece in spec.split(","):
        key, sep, value = piece.partition("=")
        if sep:
            key = key.strip()
            if key not in KEYS:
                raise BadInput(f"{spec}: unknown key {key!r} (known keys: {', '.join(KEYS)})")
            if key in values:
                raise BadInput(f"{spec}: {key} given twice")
            values[key] = value.strip()
            current = key
        elif current == "cpuset":
            values["cpuset"] += "," + piece.strip()
        else:
            raise BadInput(f"{spec}: {piece!r} is not key=value (keys: {', '.join(KEYS)})")

    cpus = None
    if "cpus" in values:
        try:
            cpus = float(values["cpus"])
        except ValueError:
            raise BadInput(f"{spec}: cpus={values['cpus']!r} is not a number") from None
        if not math.isfinite(cpus) or cpus <= 0:
            raise BadInput(f"{spec}: cpus must be a positive number of CPUs, such as 0.5 or 2")
        if cpus > len(available_cpus):
            raise BadInput(
                f"{spec}: a quota of {cpus:g} CPUs is more than the "
                f"{len(available_cpus)} CPUs on {machine} (CPUs {format_cpulist(available_cpus)})"
            )
    cpuset = None
    if "cpuset" in values:
        cpuset = parse_cpulist(values["cpuset"])
        missing = sorted(set(cpuset) - set(available_cpus))
        if missing:
            raise BadInput(
                f"{spec}: CPU {format_cpulist(missing)} does not exist on {machine} "
                f"(CPUs {format_cpulist(available_cpus)})"
            )
    return CpuConfig(label=spec, cpus=cpus, cpuset=cpuset)


def parse_specs(specs: list[str], available_cpus: tuple[int, ...], machine: str = "this machine") -> list[CpuConfig]:
    configs = [parse_spec(spec, available_cpus, machine) for spec in specs]
    labels = [config.label for config in configs]
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise BadInput(f"{duplicates[0]} is given more than once")
    return configs


def default_matrix(available_cpus: tuple[int, ...], quota_supported: bool) -> list[CpuConfig]:
    """One core pinned, all cores, and a half-core quota where quotas can be enforced."""
    first = available_cpus[0]
    configs = [CpuConfig(label=f"cpuset={first}", cpuset=(first,))]
    if len(available_cpus) > 1:
        everything = format_cpulist(available_cpus)
        configs.append(CpuConfig(label=f"cpuset={everything}", cpuset=tuple(available_cpus)))
    if quota_supported:
        configs.append(CpuConfig(label="cpus=0.5", cpus=0.5))
    return configs


def cpu_config(job_config: JobConfig) -> CpuConfig:
    """The stored configuration row as the executors take it."""
    return CpuConfig(
        label=job_config.label,
        cpus=job_config.cpus,
        cpuset=parse_cpulist(job_config.cpuset) if job_config.cpuset else None,
    )


def cpus_touched(configs: list[CpuConfig]) -> tuple[int, ...] | None:
    """The CPUs runs in ``configs`` may use: the union of their cpusets, None (all) if one is unpinned."""
    cpus: set[int] = set()
    for config in configs:
        if config.cpuset is None:
            return None
        cpus.update(config.cpuset)
    return tuple(sorted(cpus))
