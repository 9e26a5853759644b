"""The drill: evidence runs after the screen, each probe in its own run, in the slowest
and the fastest configuration, for the whole command and (pytest) each flagged test.

Evidence runs are stored as Run rows of kind ``evidence`` (never mixed into the timing
statistics) and their wall time is put beside the timing median in every evidence entry
they produce, so a rule can tell when a tracer changed what it observed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session

from services.diagnose.context import RuleContext
from services.diagnose.diagnose import screen_findings
from services.errors import BadInput
from services.jobs.lifecycle import cpu_config
from services.measure import pytest_command as junit
from services.measure.artifacts import ArtifactStore, ArtifactTooLarge
from services.measure.evidence import EvidenceRunTiming, dump
from services.measure.executors.base import Executor, RunRequest
from services.measure.probes import PROBES, EvidenceDraft, ProbeContext
from services.measure.probes.base import FAILED, unavailable
from services.measure.screen import Progress, store_run
from services.measure.stats import Summary
from services.models import Evidence, Job, JobConfig, Run, RunKind
from services.thresholds import Thresholds

# pytest options whose value is a path: the value must stay when the command's own test
# paths are swapped for one node id.
_PYTEST_PATH_OPTIONS = {
    "-c",
    "--rootdir",
    "--confcutdir",
    "--basetemp",
    "--ignore",
    "--ignore-glob",
    "--deselect",
    "-p",
    "--junitxml",
    "--junit-xml",
    "--log-file",
    "--cov",
    "--cov-config",
    "-o",
    "--override-ini",
    "--import-mode",
    "-k",
    "-m",
}


def parse_evidence(text: str | None) -> list[str] | None:
    """``--evidence`` as given: None (the default), ``none``, or a list of probe names."""
    if text is None:
        return None
    names = [name.strip() for name in text.split(",") if name.strip()]
    if names == ["none"]:
        return []
    if names == ["all"]:
        return list(PROBES)
    unknown = [name for name in names if name not in PROBES]
    if unknown or not names:
        raise BadInput(
            f"--evidence {text!r}: unknown probe {', '.join(unknown) or '(none given)'} "
            f"(known: {', '.join(PROBES)}, or all, or none)"
        )
    return list(dict.fromkeys(names))


@dataclass(frozen=True)
class Target:
    test_id: str | None  # None: the whole command
    command: list[str]
    summaries: dict[str, Summary]  # timing summaries per configuration label


def narrow_to_test(
    command: list[str], node_id: str, workdir: Path | None, is_test_path: Callable[[str], bool] | None = None
) -> list[str]:
    """The pytest command with its test paths replaced by one node id.

    pytest runs the union of its positional paths, so appending the node id alone would
    still run everything: existing paths among the arguments (not values of path
    options) are dropped first. Without a checkout (a rerun is planned before its code
    is fetched) ``is_test_path`` decides instead of the file system.
    """
    if is_test_path is None:
        is_test_path = lambda path: os.path.exists(os.path.join(workdir, path))  # noqa: E731
    kept: list[str] = []
    previous = ""
    for argument in command:
        is_value = previous in _PYTEST_PATH_OPTIONS
        path_part = argument.split("::", 1)[0]
        if kept and not argument.startswith("-") and not is_value and is_test_path(path_part):
            previous = argument
            continue
        kept.append(argument)
        previous = argument
    return [*kept, node_id]


def targets(
    job: Job, thresholds: Thresholds, probes_explicit: bool, stall_after_s: float | None, workdir: Path | None = None
) -> list[Target]:
    context = RuleContext(job, thresholds)
    samples = context.samples
    wall = samples.wall_summaries()
    if not wall:
        return []
    flagged = screen_findings(context)
    found: list[Target] = []
    slowest = max(summary.median for summary in wall.values())
    command_flagged = any(draft.test_id is None for draft in flagged)
    stalled = stall_after_s is not None and slowest >= stall_after_s
    if probes_explicit or command_flagged or stalled:
        found.append(Target(None, list(job.command), wall))
    if junit.is_pytest(job.command):
        workdir = workdir or Path(job.workdir or ".")
        for test_id in dict.fromkeys(draft.test_id for draft in flagged):
            if test_id is not None:
                found.append(
                    Target(
                        test_id,
                        narrow_to_test(job.command, test_id, workdir),
                        samples.test_summaries(test_id),
                    )
                )
    return found


def drill(
    session: Session,
    job: Job,
    executor: Executor,
    thresholds: Thresholds,
    store: ArtifactStore,
    *,
    probes: list[str] | None,
    stall_after_s: float | None,
    progress: Progress = lambda message: None,
    checkpoint=lambda: None,
    workdir: Path | None = None,
) -> int:
    """Run the evidence runs for ``job``; return how many ran. The caller commits.

    ``probes`` None is the default: every probe, but only where the screen found
    something (a finding of the timing rules, or a run slower than --stall-after). Given
    explicitly, the whole command is drilled whatever the screen found.
    """
    names = list(PROBES) if probes is None else probes
    if not names:
        return 0
    store.purge_expired()
    # A service worker drills in its own checkout (``workdir``), not in job.workdir.
    workdir = workdir or Path(job.workdir or ".")
    chosen = targets(job, thresholds, probes is not None, stall_after_s, workdir)
    if not chosen:
        job.notes = [
            *job.notes,
            "no evidence runs: the timing screen found nothing and no run stalled (pass --evidence to drill anyway)",
        ]
        return 0
    by_label = {config.label: config for config in job.configs}
    scratch = Path(tempfile.mkdtemp(prefix=f"lagtrace-job{job.id}-evidence-"))
    count = 0
    try:
        for target in chosen:
            fast_label = min(target.summaries, key=lambda label: target.summaries[label].median)
            slow_label = max(target.summaries, key=lambda label: target.summaries[label].median)
            fast_median = target.summaries[fast_label].median
            slow_median = target.summaries[slow_label].median
            stall = (
                stall_after_s
                if stall_after_s is not None
                else max(thresholds.stall_min_s, thresholds.stall_multiple * fast_median)
            )
            timeout = job.timeout_s or max(
                thresholds.evidence_timeout_min_s, thresholds.evidence_timeout_multiple * slow_median
            )
            for label in dict.fromkeys([slow_label, fast_label]):
                for name in names:
                    count += 1
                    run_dir = scratch / f"{count}-{name}"
                    run_dir.mkdir()
                    context = ProbeContext(executor, run_dir, stall, timeout, thresholds.last_snapshot_lead_s)
                    _evidence_run(session, job, by_label[label], target, name, context, store, progress, workdir)
                    checkpoint()
                    shutil.rmtree(run_dir, ignore_errors=True)  # cores are large
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return count


def _evidence_run(
    session: Session,
    job: Job,
    job_config: JobConfig,
    target: Target,
    name: str,
    context: ProbeContext,
    store: ArtifactStore,
    progress: Progress,
    workdir: Path,
) -> None:
    probe = PROBES[name](context)
    where = f"{job_config.label}" + (f" [{target.test_id}]" if target.test_id else "")
    missing = probe.unavailable()
    if missing is not None:
        _store_evidence(session, job, job_config, target.test_id, None, missing, store)
        progress(f"evidence {name} in {where}: {missing.content.reason}")
        return
    pytest_command = junit.is_pytest(target.command)
    command = list(target.command)
    if pytest_command:
        command = junit.with_junit(command, context.executor.visible_path(context.run_dir / junit.JUNIT_FILE))
    try:
        result = context.executor.run(
            RunRequest(
                command=probe.command(command),
                workdir=workdir,
                config=cpu_config(job_config),
                run_dir=context.run_dir,
                timeout_s=context.timeout_s,
                env=probe.env(),
                watcher=probe.watcher(),
                job_id=job.id,
            )
        )
    except BadInput as exc:
        # The screen ran this command, so what failed to start is the probe's tool (a
        # tool_path that does not exist, or is not executable): the job goes on.
        failed = unavailable(probe.kind, f"the {name} evidence run could not start: {exc}", FAILED)
        _store_evidence(session, job, job_config, target.test_id, None, failed, store)
        progress(f"evidence {name} in {where}: {failed.content.reason}")
        return
    cases = junit.parse(context.run_dir / junit.JUNIT_FILE) if pytest_command else []
    repetition = 1 + sum(1 for r in job_config.runs if r.kind == RunKind.evidence)
    run = store_run(
        session, job_config, RunKind.evidence, repetition, result, cases, probe=name, test_id=target.test_id
    )
    observed = result.wall_s
    if target.test_id is not None:
        durations = [case.duration_s for case in cases if case.test_id == target.test_id]
        observed = durations[0] if durations else result.wall_s
    timing_median = target.summaries[job_config.label].median if job_config.label in target.summaries else None
    observer = EvidenceRunTiming(
        run_id=run.id,
        wall_s=result.wall_s,
        observed_s=observed,
        timing_median_s=timing_median,
        ratio=round(observed / timing_median, 3) if timing_median else None,
        exit_code=result.exit_code,
        timed_out=result.timed_out,
    )
    drafts = probe.collect(result)
    for draft in drafts:
        draft.content.probe = draft.content.probe or name
        draft.content.run = observer
        _store_evidence(session, job, job_config, target.test_id, run, draft, store)
    summary = ", ".join(f"{d.kind} {d.status}" for d in drafts)
    progress(
        f"evidence {name} in {where}: {result.wall_s:.3f} s"
        + (f" (timing median {timing_median:.3f} s)" if timing_median else "")
        + f"; {summary}"
    )


def _store_evidence(
    session: Session,
    job: Job,
    job_config: JobConfig,
    test_id: str | None,
    run: Run | None,
    draft: EvidenceDraft,
    store: ArtifactStore,
) -> Evidence:
    artifacts = []
    for file in draft.files:
        key = f"job-{job.id}/run-{run.id if run else 'none'}/{file.name}"
        try:
            artifacts.append(store.put(key, file.path, file.media_type).as_dict())
        except (ArtifactTooLarge, OSError) as exc:
            artifacts.append({"name": file.name, "media_type": file.media_type, "stored": False, "reason": str(exc)})
    evidence = Evidence(
        job=job,
        config=job_config,
        run=run,
        test_id=test_id,
        kind=draft.kind,
        content=dump(draft.content),
        text=draft.text,
        artifacts=artifacts,
    )
    session.add(evidence)
    session.flush()
    return evidence
