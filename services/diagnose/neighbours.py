"""Whether a difference between two groups of runs may be the machine's other work.

Every run records how many CPUs other processes kept busy while it lasted
(Run.foreign_cpus). A busy neighbour changes the latency lagtrace studies in either
direction: it takes a shared core from a CPU-bound test (slower), or keeps the second
core awake so a thread hand-off no longer waits for a wake-up (faster). So when the runs
of one group were timed beside much more foreign work than the runs of the other, the
difference between the groups is no evidence about the program: the rules say so and
lower their verdict, instead of naming a cause the program may not have.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from services.measure.hostload import BUSY_MACHINE_CPUS


@dataclass(frozen=True)
class NeighbourLoad:
    """The median CPUs other processes used during each group's runs."""

    first: float
    second: float

    def describe(self, first: str, second: str) -> str:
        return (
            f"Other processes kept {self.first:.1f} CPUs busy during the {first} runs and "
            f"{self.second:.1f} during the {second} runs, so part of the difference may be theirs"
        )


def confounded(first: list[float] | None, second: list[float] | None) -> NeighbourLoad | None:
    """The two groups' neighbour loads when they differ enough to explain a latency
    difference (one group busy, the other at least ``BUSY_MACHINE_CPUS`` less so); None
    when the loads were alike or were not recorded."""
    if not first or not second:
        return None
    load = NeighbourLoad(statistics.median(first), statistics.median(second))
    busier, quieter = max(load.first, load.second), min(load.first, load.second)
    if busier >= BUSY_MACHINE_CPUS and busier - quieter >= BUSY_MACHINE_CPUS:
        return load
    return None
