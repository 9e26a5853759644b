"""The survey's census: the head's warm-up run in one configuration traced by the census
probe (services/measure/probes/census.py), so that each test's sleeps, reads and event
loop cost the tracer's overhead, not another run of the suite.

A command that is no pytest suite has no tests to count, but it may run an event loop
that its own callbacks block: an asyncio server whose 96 requests each hold the loop 4 ms
of CPU is blocked most of its run, and its timing is flat across configurations, so the
screen finds nothing and no drill runs. Its warm-up run in the same configuration carries
the asyncio_loop probe's hook (services/measure/probes/asyncio_loop.py): no tracer, a
callback wrapper and a 5 ms heartbeat, in a run that was made anyway and is never timing.
Where no loop ran, that is evidence too: the drill takes no asyncio_loop runs of it."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from sqlalchemy.orm import Session

from services.evidence import AsyncioLoopContent, CensusContent, EvidenceKind
from services.measure import budget, pytest_command
from services.measure.artifacts import ArtifactStore
from services.measure.configs import cpu_config
from services.measure.evidence_store import store_evidence
from services.measure.executors.base import Executor
from services.measure.probes import ProbeContext
from services.measure.probes.asyncio_loop import AsyncioLoopProbe
from services.measure.probes.census import CensusProbe, calls, suspects
from services.measure.runs import Measured, Wrapping
from services.models import Evidence, Job, JobConfig, RunKind
from services.thresholds import Thresholds

Progress = Callable[[str], None]


def census_config(job: Job) -> JobConfig | None:
    """The configuration whose survey run the census traces: without a quota (a throttled
    run's durations are what the quota made them), and on the fewest CPUs, where tracer and
    traced take turns on one core (each ptrace stop cost 3-5x more across two cores:
    docs/explanations/cost-model.md), so its slowdown is least. Never the widest when there
    is another: the widest is the gate's configuration (services/jobs/gate.py), whose
    untraced survey runs are the history gates compare with. None: every one has a quota."""
    free = [config for config in job.configs if config.cpus is None]
    gate = budget.widest(job)
    others = [config for config in free if config is not gate] or free
    return min(others, key=lambda c: (cpu_config(c).effective_cpus, c.position), default=None)


def survey_census(job: Job) -> list[Evidence]:
    """The census evidence the survey took (SurveyCensus): one per traced survey run, so
    one per shard of a suite screened in shards, each on its shard's node."""
    return [
        evidence
        for evidence in job.evidence
        if evidence.kind == EvidenceKind.census and evidence.run is not None and evidence.run.kind is RunKind.survey
    ]


class SurveyCensus:
    """The census (services/measure/probes/census.py) taken in the survey itself: the head's
    warm-up run in one configuration (``census_config``) runs under the census's strace, so
    each test's sleeps and reads cost the tracer's overhead, not another run of the suite (a
    census run of its own cost 1.03 x a 300 s suite: a fifth of a job). Its tests that look
    like polling or tiny reads (``suspects``) are stored in its evidence, which the drill
    reads on whichever worker finishes the job. The traced run is evidence, never timing
    (Run.traced): no figure of the report, the history or the budget's unit comes from it."""

    def __init__(
        self,
        session: Session,
        job: Job,
        executor: Executor,
        thresholds: Thresholds,
        store: ArtifactStore,
        progress: Progress = lambda message: None,
    ) -> None:
        self.session, self.job, self.executor = session, job, executor
        self.thresholds, self.store, self.progress = thresholds, store, progress
        chosen = census_config(job)
        self.label = chosen.label if chosen is not None else None
        self.counted: CensusContent | None = None
        self._probe: CensusProbe | AsyncioLoopProbe | None = None

    def run_probe(self) -> str | None:
        """The probe the wrapped warm-up run is stored with: the census's tracer makes it a
        traced run (Run.traced); the asyncio hook is no tracer, and leaves it a warm-up."""
        return CensusProbe.name if isinstance(self._probe, CensusProbe) else None

    def wrapping(self, job_config: JobConfig, run_dir: Path) -> Wrapping | None:
        """The census's tracer around this warm-up run (a command that is no pytest suite:
        the asyncio hook alone), or None: another configuration, probes named by the user
        (they get what they asked for), or no strace here (said once, in the census's
        evidence)."""
        if job_config.label != self.label or self.job.probes is not None:
            return None
        timeout = self.job.timeout_s
        context = ProbeContext(self.executor, run_dir, stall_after_s=timeout or math.inf, timeout_s=timeout)
        if not pytest_command.is_pytest(self.job.command):
            loop = AsyncioLoopProbe(context)
            loop.floor_s = self.thresholds.event_loop_blocked_floor_s
            self._probe = loop
            return Wrapping(env=loop.env())
        probe = CensusProbe(context)
        probe.floor_s = self.thresholds.event_loop_blocked_floor_s
        missing = probe.unavailable()
        if missing is not None:
            store_evidence(self.session, self.job, job_config, None, None, missing, self.store, self.executor)
            self.progress(f"census in {job_config.label}: {missing.content.reason}")
            return None
        self._probe = probe
        return Wrapping(probe.command, probe.env(), probe.watcher(), ptrace=probe.ptrace)

    def collect(self, job_config: JobConfig, measured: Measured) -> bool:
        """Store the census of the traced run; False when the tracer never ran the suite
        (no test reported, no trace): the caller takes that run again, untraced."""
        if self._probe is None:
            raise RuntimeError("collect() without wrapping(): nothing was traced")
        if isinstance(self._probe, AsyncioLoopProbe):
            return self._collect_loop(job_config, measured, self._probe)
        [draft] = self._probe.collect(measured.result)
        self._probe = None
        if not measured.cases and not (isinstance(draft.content, CensusContent) and draft.content.ok):
            return False
        draft.content.probe = CensusProbe.name
        counted = draft.content if isinstance(draft.content, CensusContent) and draft.content.ok else None
        if counted is not None:
            self.counted = counted
            # A test's rate of sleeps is judged over what it would have taken untraced.
            added = self.tracer_s().get(job_config.label, {})
            durations = {
                case.test_id: case.duration_s - added.get(case.test_id, 0.0)
                for case in measured.cases
                if case.outcome == "passed"
            }
            counted.suspects = suspects(counted, durations, self.thresholds)
        store_evidence(self.session, self.job, job_config, None, measured.run, draft, self.store, self.executor)
        if counted is None:
            self.progress(f"census in {job_config.label}: {draft.content.reason}")
            return True
        found = counted.suspects or []
        self.progress(
            f"census in {job_config.label} (its survey run, traced): {counted.tests_seen or 0} tests; "
            + (
                f"{len(found)} polled, read in tiny pieces or blocked an event loop: {', '.join(found[:5])}"
                if found
                else "none polled, read in tiny pieces or blocked an event loop"
            )
        )
        return True

    def _collect_loop(self, job_config: JobConfig, measured: Measured, probe: AsyncioLoopProbe) -> bool:
        """A command's warm-up with the asyncio hook: its evidence, which the
        event_loop_blocked rule weighs as a drill's where a loop ran, and which spares the
        drill its asyncio_loop runs where none did (drill._needless)."""
        self._probe = None
        [draft] = probe.collect(measured.result)
        store_evidence(self.session, self.job, job_config, None, measured.run, draft, self.store, self.executor)
        content = draft.content
        if isinstance(content, AsyncioLoopContent) and content.ok:
            held = content.held_s if content.held_s is not None else content.blocked_s
            self.progress(
                f"census in {job_config.label} (its warm-up run): an event loop ran, its callbacks held it "
                f"{held or 0.0:.3f} s of {measured.result.wall_s:.3f} s"
            )
        return True

    def tracer_s(self) -> dict[str, dict[str, float]]:
        """What the tracer added to each test's duration in the traced run (its sleeps and
        reads times the cost of one traced call, as the run timed it), by configuration
        label: the survey judges the traced durations less this."""
        if self.counted is None or self.label is None or not self.counted.traced_call_s:
            return {}
        cost = self.counted.traced_call_s
        return {self.label: {test_id: calls(test) * cost for test_id, test in (self.counted.tests or {}).items()}}

    def perturbed(self) -> set[str]:
        """The tests whose traced calls cost so much that the estimate of what they added
        could be off by the smallest difference a timing verdict judges
        (cpu_sensitivity_min_s): their survey duration in the traced configuration cannot
        clear them, so they go on to the focused screen, whose runs are untraced."""
        return {
            test_id
            for added in self.tracer_s().values()
            for test_id, seconds in added.items()
            if TRACER_ERROR * seconds >= self.thresholds.cpu_sensitivity_min_s
        }


# How far one traced call's cost, timed on the plugin's lseeks, may be from a read's or a
# sleep's in the tests (a read also names its descriptor): 150-190 us a read here, under
# `strace --seccomp-bpf`, against 0.3-0.4 us untraced.
TRACER_ERROR = 0.5
