"""Timed runs a neighbour disturbed, taken again (services/measure/screen.py): other
processes busy on the node's CPUs during a run can hide the slowdown being measured, or
make one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from services.measure.runs import Measured
from services.models import Job, RunKind
from services.thresholds import Thresholds

Progress = Callable[[str], None]


# The runs whose numbers make a verdict: a neighbour's work during one is taken again.
RETAKEN_KINDS = (RunKind.timing, RunKind.base, RunKind.focus, RunKind.base_focus)


@dataclass
class Neighbour:
    """What the job's retakes learned: a run still disturbed after Thresholds.retake_per_run
    retakes in a row means the neighbour stays, and further retakes would only cost."""

    stayed: bool = False


def retake_while_disturbed(
    job: Job,
    thresholds: Thresholds,
    measured: Measured,
    run: Callable[[], Measured],
    checkpoint: Callable[[], None],
    progress: Progress,
    neighbour: Neighbour,
) -> Measured:
    """While other processes kept more than Thresholds.retake_foreign_cpus busy during the
    run, keep it on record as `disturbed` and take it again (at most retake_per_run times
    in a row, retake_max_per_job a job, and no more once a neighbour stayed through a whole
    series): a neighbour on a shared core can hide exactly the slowdown being measured (a
    hand-off finds the other core awake), or make one."""

    def disturbed() -> bool:
        return measured.result.foreign_cpus > thresholds.retake_foreign_cpus and not measured.result.timed_out

    for _ in range(thresholds.retake_per_run):
        if neighbour.stayed or not disturbed():
            return measured
        taken = sum(1 for config in job.configs for r in config.runs if r.kind is RunKind.disturbed)
        if taken >= thresholds.retake_max_per_job:
            return measured
        measured.run.kind = RunKind.disturbed
        _note_retakes(job, thresholds, taken + 1, stayed=False)
        checkpoint()
        progress(
            f"{measured.run.config.label}: run {measured.run.repetition} taken again: other processes used "
            f"{measured.result.foreign_cpus:.1f} CPUs during it"
        )
        measured = run()
    if thresholds.retake_per_run and not neighbour.stayed and disturbed():
        neighbour.stayed = True
        taken = sum(1 for config in job.configs for r in config.runs if r.kind is RunKind.disturbed)
        _note_retakes(job, thresholds, taken, stayed=True)
    return measured


def _note_retakes(job: Job, thresholds: Thresholds, taken: int, *, stayed: bool) -> None:
    note = (
        f"{taken} timed run(s) taken again: other processes kept more than {thresholds.retake_foreign_cpus:g} "
        "CPUs busy during them (kept on record as disturbed, out of the statistics)"
    )
    if stayed:
        note += "; the neighbour stayed through a run and its retakes, so no more runs were taken again"
    job.notes = [n for n in job.notes if "timed run(s) taken again" not in n] + [note]
