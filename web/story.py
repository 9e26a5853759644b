"""A finding's page as one story: the symptom (which configurations, how much slower),
the cause (the job's diagnosis of the test), the slow configuration's evidence beside
the fast one's, the runs, the other jobs with the same problem, and whether the machine
was busy while the runs were timed.

Evidence content is read through its kind's model (services/evidence.py), so
templates compare kinds with ``EvidenceKind`` members and read typed fields.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from services.diagnose.report_parts import Diagnosis
from services.evidence import EvidenceContent, EvidenceKind, EvidenceStatus, StraceContent, parse
from services.jobs.submit import finished_page
from services.jobs.summaries import read_page
from services.measure import hostload
from services.measure.samples import collect
from services.models import COMMAND_KINDS, Evidence, Finding, Job, JobConfig, Run
from services.thresholds import Thresholds

# Which evidence tells the story first when several kinds are paired.
KIND_ORDER = [
    EvidenceKind.stall,
    EvidenceKind.gdb,
    EvidenceKind.pyspy_dump,
    EvidenceKind.faulthandler,
    EvidenceKind.strace,
    EvidenceKind.pyspy,
    EvidenceKind.reads,
    EvidenceKind.asyncio_loop,
    EvidenceKind.census,
    EvidenceKind.proc_io,
    EvidenceKind.imports,
]
OTHER_JOBS = 50
# A warning once this share of the timing runs had a busy machine beside them: one busy
# run among twenty moves no median, a quarter of them can.
BUSY_SHARE = 0.2


@dataclass
class EvidenceView:
    id: int
    kind: EvidenceKind
    config: str | None
    test: str | None
    content: EvidenceContent
    text: str | None
    artifacts: list[dict[str, Any]]


def evidence_view(entry: Evidence, sort: str | None = None) -> EvidenceView:
    """An entry with its content parsed by its kind's model (strace rows sorted by ``sort``)."""
    kind = EvidenceKind(entry.kind)  # every probe writes one of these
    try:
        content = parse(kind, entry.content or {})
    except ValidationError as exc:
        # Written by an older lagtrace in another shape: say so rather than fail the page.
        content = EvidenceContent(status=EvidenceStatus.failed, reason=f"stored content unreadable: {exc}"[:300])
    if sort and isinstance(content, StraceContent) and content.syscalls:
        content.syscalls = sorted(content.syscalls, key=lambda row: getattr(row, sort) or 0, reverse=sort != "name")
    return EvidenceView(
        entry.id,
        kind,
        entry.config.label if entry.config else None,
        entry.test_id,
        content,
        entry.text,
        list(entry.artifacts or []),
    )


@dataclass
class Busy:
    """How busy the rest of the machine was while the timing runs ran (Run.foreign_cpus)."""

    runs: int
    busy_runs: int
    median_cpus: float
    max_cpus: float
    configs: list[str]

    @property
    def warn(self) -> bool:
        return self.runs > 0 and (
            self.busy_runs / self.runs >= BUSY_SHARE or self.median_cpus > hostload.BUSY_MACHINE_CPUS
        )


def busy_machine(job: Job, labels: list[str] | None = None, session: Session | None = None) -> Busy:
    """The timing runs of ``labels`` (all configurations when None) against the threshold.
    ``session``: each run's foreign_cpus read in one query of two columns, not every run
    of every configuration as objects (the job page, which shows nothing else of them)."""
    if session is not None:
        read: dict[str, list[float]] = {}
        for label, value in session.execute(
            select(JobConfig.label, Run.foreign_cpus)
            .join(Run, Run.config_id == JobConfig.id)
            .where(JobConfig.job_id == job.id, Run.kind.in_(COMMAND_KINDS))
            .order_by(JobConfig.position, Run.id)
        ):
            read.setdefault(label, []).append(value or 0.0)
        per_config = list(read.items())
    else:
        per_config = [
            (config.label, [run.foreign_cpus or 0.0 for run in config.runs if run.kind in COMMAND_KINDS])
            for config in job.configs
        ]
    foreign: list[float] = []
    configs: list[str] = []
    for label, values in per_config:
        if labels is not None and label not in labels:
            continue
        foreign += values
        if any(value > hostload.BUSY_MACHINE_CPUS for value in values):
            configs.append(label)
    if not foreign:
        return Busy(0, 0, 0.0, 0.0, [])
    return Busy(
        len(foreign),
        sum(value > hostload.BUSY_MACHINE_CPUS for value in foreign),
        statistics.median(foreign),
        max(foreign),
        configs,
    )


@dataclass
class Pair:
    """One kind of evidence: the slow configuration's entries beside the fast one's."""

    kind: EvidenceKind
    slow: list[EvidenceView] = field(default_factory=list)
    fast: list[EvidenceView] = field(default_factory=list)
    other: list[EvidenceView] = field(default_factory=list)  # other configurations, or none
    cited: bool = False


@dataclass
class Story:
    finding: Finding
    diagnosis: Diagnosis | None
    samples: dict[str, list[float]]  # configuration -> the test's (or command's) timing runs
    medians: dict[str, float]
    slow: str | None
    fast: str | None
    pairs: list[Pair]
    other_jobs: list[Finding]
    busy: Busy
    cited: set[int]

    @property
    def ratio(self) -> float | None:
        if self.slow and self.fast and self.medians.get(self.fast):
            return self.medians[self.slow] / self.medians[self.fast]
        return None


def compared(medians: dict[str, float], finding_config: str | None) -> tuple[str | None, str | None]:
    """The configurations the page's symptom compares: the finding's own (else the slowest)
    against the fastest. A configuration is never compared with itself (a slow_startup
    found in the fastest configuration read "1.0x slower with cpuset=0 than with
    cpuset=0"): fast is None then, and the page says the finding's own symptom."""
    if not medians:
        return None, None
    fast = min(medians, key=lambda label: medians[label])
    slow = finding_config if finding_config in medians else max(medians, key=lambda label: medians[label])
    if slow == fast or medians[slow] <= medians[fast]:
        return slow, None
    return slow, fast


def finding_story(
    session: Session,
    finding: Finding,
    project_ids: list[int],
    sort: str | None = None,
    thresholds: Thresholds | None = None,
) -> Story:
    job = finding.job
    samples = collect(job)
    per_config = samples.wall if finding.test_id is None else samples.tests.get(finding.test_id, {})
    per_config = {label: values for label, values in per_config.items() if values}
    medians = {label: statistics.median(values) for label, values in per_config.items()}
    slow, fast = compared(medians, finding.config_label)
    diagnoses = (
        read_page(finished_page(session, job, thresholds)).diagnoses
        if job.status.value in ("done", "failed", "cancelled")
        else []
    )
    diagnosis = next((d for d in diagnoses if finding.id in d.findings), None)

    cited = {int(i) for i in finding.evidence_ids}
    # The test's evidence in this job (the whole command's too), cited or not.
    entries = [e for e in job.evidence if finding.test_id is None or e.test_id in (None, finding.test_id)]
    pairs: dict[EvidenceKind, Pair] = {}
    for entry in entries:
        view = evidence_view(entry, sort)
        pair = pairs.setdefault(view.kind, Pair(view.kind))
        side = pair.slow if view.config == slow else pair.fast if view.config == fast else pair.other
        side.append(view)
        pair.cited = pair.cited or entry.id in cited
    ordered = sorted(
        pairs.values(),
        key=lambda p: (not p.cited, KIND_ORDER.index(p.kind) if p.kind in KIND_ORDER else len(KIND_ORDER)),
    )
    others = list(
        session.scalars(
            select(Finding)
            .join(Job, Job.id == Finding.job_id)
            .where(
                Finding.fingerprint == finding.fingerprint, Finding.id != finding.id, Job.project_id.in_(project_ids)
            )
            .order_by(Finding.id.desc())
            .limit(OTHER_JOBS)
        )
    )
    labels = [label for label in (slow, fast) if label]
    return Story(
        finding,
        diagnosis,
        per_config,
        medians,
        slow,
        fast,
        ordered,
        others,
        busy_machine(job, labels or None),
        cited,
    )
