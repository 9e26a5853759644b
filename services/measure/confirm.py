"""confirm: a diagnosed cause tested by turning its knob (docs/explanations/confirm.md).

A cause is named from evidence that differs between a slow and a fast configuration. The
engineers whose stories lagtrace automates went one step further before they believed
one: they changed one thing and measured again. This step does that for each diagnosed
test whose cause has an outside knob: it reruns the test in the cause's slow
configuration with and without the knob, in pairs whose order swaps each time
(with-without, then without-with: a drift of the machine falls on both arms alike), and
stops as soon as the project's sequential rule decides (services/measure/sequential.py
compare_arms), at most ``confirm_max_pairs`` pairs.

The knobs are the ones the fixes are made of:

- ``gil_contention``: the GIL's switch interval, 0.5 ms instead of 5 ms
  (``sys.setswitchinterval``, set at start-up): a thread that waits for the GIL another
  holds gets it ten times sooner, so a hand-off that waited out the interval stops waiting;
- ``cpu_throttling``: the BLAS and OpenMP pools capped to the quota (their own environment
  variables, read when the library loads), then, where that did not do it, the CPU count
  the interpreter reports set to the quota (``PYTHON_CPU_COUNT`` on CPython 3.13 and
  later, a start-up shim of ``os.cpu_count`` before it): a pool sized from the host's
  CPUs is sized from the quota;
- ``slow_startup`` of a pytest command: the pytest plugins whose imports the start-up
  evidence names, taken out with ``-p no:NAME``: one alone where its imports alone could
  make the run faster by the rule's change ratio, then all of them together (18 plugins
  of about 0.05 s each cost a start-up together what none costs alone; which of them costs
  what, the import times already say). ``-p no:`` takes the name of the plugin's entry
  point, not its module's (hypothesis's is ``hypothesispytest``), so one run in the job's
  own environment first reads which installed plugin ships each module named
  (``PLUGINS_SCRIPT``); a module no plugin ships gets no knob.

Confirmed: the knob made the test faster by at least the rule's change ratio, decided. Not
confirmed: decided no faster, or not decided within the pairs: the diagnosis then names no
cause ("not established"), never a guess (services/diagnose/diagnoses.py). Every run is an
evidence run (probe ``confirm``), listed with the others; the budget bounds them.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.orm import Session

from services.errors import BadInput
from services.evidence import ConfirmContent, EvidenceKind, dump
from services.measure import budget, pytest_command
from services.measure.executors.base import Executor
from services.measure.install import read_regular_file
from services.measure.probes.hooks import install_hook
from services.measure.runs import Wrapping, run_once
from services.measure.sequential import DIFFERENT, SAME, SequentialRule, compare_arms
from services.models import Evidence, Finding, Job, JobConfig, RunKind
from services.thresholds import Thresholds

PROBE = "confirm"
CONFIRMED, NOT_CONFIRMED, UNDECIDED, FAILED = "confirmed", "not confirmed", "undecided", "failed"
HOOK_DIR = "confirm-hook"
# The switch interval the GIL knob sets: a tenth of CPython's 5 ms default. A pull request
# that measured it flipped in alternating windows found 0.5 ms faster in 8 of 8 pairs.
SWITCH_INTERVAL_S = 0.0005
# The pools' own variables, each read once when its library loads (OpenBLAS, OpenMP as
# GCC's libgomp and LLVM's libomp read it, MKL, BLIS, numexpr, Apple's Accelerate).
POOL_VARIABLES = (
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)
SWITCH_SHIM = "import os, sys\nsys.setswitchinterval(float(os.environ['LAGTRACE_CONFIRM_SWITCH_S']))\n"
# Before CPython 3.13's PYTHON_CPU_COUNT: what os.cpu_count (and multiprocessing's,
# concurrent.futures' default workers) report.
CPU_COUNT_SHIM = (
    "import os, sys\n"
    "_n = int(os.environ['LAGTRACE_CONFIRM_CPU_COUNT'])\n"
    "os.cpu_count = lambda: _n\n"
    "if hasattr(os, 'process_cpu_count'):\n"
    "    os.process_cpu_count = lambda: _n\n"
)


# Run in the job's environment with the modules as arguments: for each, the pytest11 entry
# points (https://docs.pytest.org/en/stable/how-to/writing_plugins.html) of the
# distribution that installs it, one "lagtrace-plugin MODULE NAME" line each. A
# distribution's modules are the top-level names of its files (its RECORD), and the
# module its entry point loads.
PLUGINS_SCRIPT = (
    "import sys\n"
    "from importlib import metadata\n"
    "wanted = set(sys.argv[1:])\n"
    "for ep in metadata.entry_points(group='pytest11'):\n"
    "    tops = {ep.module.split('.')[0]}\n"
    "    for f in (ep.dist.files or []) if ep.dist is not None else []:\n"
    "        if f.parts and not f.parts[0].endswith(('.dist-info', '.data', '.egg-info')):\n"
    "            tops.add(f.parts[0].removesuffix('.py'))\n"
    "    for top in sorted(tops & wanted):\n"
    "        print('lagtrace-plugin', top, ep.name)\n"
)
_PLUGIN_LINE = re.compile(r"^lagtrace-plugin ([A-Za-z_][A-Za-z0-9_]{0,99}) ([A-Za-z0-9_.\-]{1,100})$")
# The plugins tried for one slow start-up: the slowest the evidence names.
MAX_PLUGINS = 3
PLUGINS_OUTPUT_BYTES = 64 * 1024


@dataclass(frozen=True)
class Cause:
    """A diagnosis's cause, as the confirm step reads it (services/diagnose/diagnoses.py):
    its test (None: the whole command), its kind and its finding."""

    test: str | None
    kind: str
    finding: int


@dataclass(frozen=True)
class Knob:
    """One thing turned: as a user would set it (``name``) and in words (``says``)."""

    name: str
    says: str
    env: dict[str, str] = field(default_factory=dict)
    shim: str | None = None  # a sitecustomize run at start-up, reading ``env``
    args: tuple[str, ...] = ()  # options added to the command (pytest reads them anywhere)


def knobs_for(cause: str, config: JobConfig) -> list[Knob]:
    """The knobs of a cause in its slow configuration, tried in order; none: no outside
    knob (a blocked loop, a poll, tiny reads are the code's own, and a fix is a change
    of code)."""
    if cause == "gil_contention":
        interval = f"{SWITCH_INTERVAL_S * 1000:g} ms"
        return [
            Knob(
                f"sys.setswitchinterval({SWITCH_INTERVAL_S:g})",
                f"the GIL's switch interval {interval} instead of 5 ms",
                {"LAGTRACE_CONFIRM_SWITCH_S": repr(SWITCH_INTERVAL_S)},
                SWITCH_SHIM,
            )
        ]
    if cause == "cpu_throttling" and config.cpus is not None:
        threads = str(max(1, math.floor(config.cpus)))
        pools = {name: threads for name in POOL_VARIABLES}
        return [
            Knob(
                " ".join(f"{name}={value}" for name, value in list(pools.items())[:2]) + " ...",
                f"the BLAS and OpenMP thread pools capped to the quota ({threads} thread)",
                pools,
            ),
            Knob(
                f"PYTHON_CPU_COUNT={threads}",
                f"the CPU count the interpreter reports set to the quota ({threads})",
                {"PYTHON_CPU_COUNT": threads, "LAGTRACE_CONFIRM_CPU_COUNT": threads},
                CPU_COUNT_SHIM,
            ),
        ]
    return []


def plugin_knobs(
    plugins: dict[str, list[str]],
    seconds: dict[str, float] | None = None,
    run_s: float | None = None,
    change_ratio: float = 1.2,
) -> list[Knob]:
    """The plugins' knobs (``plugins``: module -> the entry-point names of its
    distribution's pytest plugins, slowest module first; ``seconds``: each module's import
    time as the start-up evidence measured it; ``run_s``: the run's time without a knob).

    A plugin alone, where its imports alone could make the run ``change_ratio`` faster (a
    smaller saving cannot confirm, and its pairs would be spent for nothing; without the
    times, each is tried), the slowest ``MAX_PLUGINS``; then, where two or more plugins
    are named, all of them together."""
    named = {module: names for module, names in plugins.items() if names}

    def knob(modules: list[str]) -> Knob:
        args = tuple(arg for module in modules for name in named[module] for arg in ("-p", f"no:{name}"))
        which = (
            f"the pytest plugin that imports {modules[0]}"
            if len(modules) == 1
            else (f"the {len(modules)} pytest plugins that import {', '.join(modules)}")
        )
        return Knob(" ".join(args), f"{which} taken out", args=args)

    def could_confirm(saved_s: float) -> bool:
        return seconds is None or not run_s or saved_s >= run_s * (1 - 1 / change_ratio)

    alone = [module for module in named if could_confirm((seconds or {}).get(module, 0.0))][:MAX_PLUGINS]
    knobs = [knob([module]) for module in alone]
    if len(named) > 1 and could_confirm(sum((seconds or {}).get(module, 0.0) for module in named)):
        knobs.append(knob(list(named)))
    return knobs


def read_plugins(output: str | None, modules: list[str]) -> dict[str, list[str]]:
    """PLUGINS_SCRIPT's lines, in the order of ``modules``; any other line (the job's
    output is its own, and not trusted) is ignored."""
    found: dict[str, list[str]] = {module: [] for module in modules}
    for line in (output or "").splitlines():
        match = _PLUGIN_LINE.match(line.strip())
        if match and match[1] in found and match[2] not in found[match[1]]:
            found[match[1]].append(match[2])
    return found


def startup_modules(metrics: dict | None) -> list[str]:
    """The top-level modules of the imports a slow_startup finding names, slowest first."""
    return list(startup_seconds(metrics))


def startup_seconds(metrics: dict | None) -> dict[str, float]:
    """Each top-level module's import time as a slow_startup finding lists it (the longest
    of its entries: a nested import's cumulative time is inside its parent's), slowest first."""
    found: dict[str, float] = {}
    for entry in (metrics or {}).get("slowest") or []:
        name = entry.get("module") if isinstance(entry, dict) else None
        seconds = entry.get("cumulative_s") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name or not name.split(".")[0].isidentifier():
            continue
        top = name.split(".")[0]
        value = float(seconds) if isinstance(seconds, int | float) and not isinstance(seconds, bool) else 0.0
        found[top] = max(found.get(top, 0.0), value)
    return dict(sorted(found.items(), key=lambda item: -item[1]))


def rule_of(thresholds: Thresholds) -> SequentialRule:
    """The project's sequential rule (its level and change ratio, as a gate judges), over
    at most ``confirm_max_pairs`` pairs."""
    return SequentialRule(looks=thresholds.confirm_max_pairs, change_ratio=thresholds.base_change_ratio)


def confirm(
    session: Session,
    job: Job,
    executor: Executor,
    thresholds: Thresholds,
    causes: list[Cause],
    *,
    workdir: Path,
    progress: Callable[[str], None],
    checkpoint: Callable[[], None],
) -> int:
    """Turn the knobs of each cause that has one (``causes``: worst diagnosis first), at
    most ``confirm_max_causes`` of them; how many were tried."""
    tried = 0
    for cause in causes:
        if tried >= thresholds.confirm_max_causes:
            break
        finding = session.get(Finding, cause.finding)
        config = next((c for c in job.configs if finding is not None and c.label == finding.config_label), None)
        knobs = knobs_for(cause.kind, config) if config is not None else []
        if config is not None and cause.kind == "slow_startup" and pytest_command.is_pytest(job.command):
            seconds = startup_seconds(finding.metrics if finding is not None else None)
            if seconds:
                plugins = _plugins(session, executor, job, config, list(seconds), workdir)
                knobs = plugin_knobs(plugins, seconds, _median_wall(config), rule_of(thresholds).change_ratio)
        if config is None or not knobs:
            continue
        tried += 1
        command = list(job.command)
        if cause.test is not None:
            ceiling = pytest_command.search_ceiling(job.executor)
            command = pytest_command.narrow_to_test(command, cause.test, workdir, ceiling=ceiling)
        for knob in knobs:
            earlier = {id(run) for run in config.runs}
            content = _experiment(
                session, job, executor, thresholds, config, cause.test, command, knob, workdir, checkpoint
            )
            spent = [run for run in config.runs if id(run) not in earlier and run.probe == PROBE]
            content.runs, content.runs_s = len(spent), round(sum(run.wall_s for run in spent), 3)
            content.cause, content.test = cause.kind, cause.test
            # The configuration's own job: ``job`` may be a shard's view of it (services/measure/evidence_store.py).
            session.add(
                Evidence(
                    job=config.job, config=config, test_id=cause.test, kind=EvidenceKind.confirm, content=dump(content)
                )
            )
            checkpoint()
            progress(f"confirm {cause.kind} of {cause.test or 'the command'}: {describe(content)}")
            if content.verdict == CONFIRMED:
                break
    return tried


def _plugins(
    session: Session, executor: Executor, job: Job, config: JobConfig, modules: list[str], workdir: Path
) -> dict[str, list[str]]:
    """Which pytest plugin ships each module, read by one run of PLUGINS_SCRIPT in the job's
    environment (its interpreter: the command's own where it names one)."""
    program = job.command[0] if os.path.basename(job.command[0]).startswith("python") else "python"
    scratch = Path(tempfile.mkdtemp(prefix=f"lagtrace-confirm{job.id}-"))
    try:
        runs = sum(1 for run in config.runs if run.kind is RunKind.evidence)
        measured = run_once(
            session,
            executor,
            config,
            command=[program, "-c", PLUGINS_SCRIPT, *modules],
            workdir=workdir,
            run_dir=scratch,
            timeout_s=60.0,
            kind=RunKind.evidence,
            repetition=1 + runs,
            probe=PROBE,
        )
        if measured.result.exit_code != 0:
            return {}
        # What the command printed (each executor writes it there); not through a link.
        output = read_regular_file(scratch / "output.log", max_bytes=PLUGINS_OUTPUT_BYTES)
    except BadInput:
        return {}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return read_plugins(output.decode("utf-8", "replace"), modules)


def _experiment(
    session: Session,
    job: Job,
    executor: Executor,
    thresholds: Thresholds,
    config: JobConfig,
    test_id: str | None,
    command: list[str],
    knob: Knob,
    workdir: Path,
    checkpoint: Callable[[], None],
) -> ConfirmContent:
    rule = rule_of(thresholds)
    content = ConfirmContent(cause="", knob=knob.name, says=knob.says, config=config.label, verdict=UNDECIDED)
    scratch = Path(tempfile.mkdtemp(prefix=f"lagtrace-confirm{job.id}-"))
    try:
        for pair in range(rule.looks):
            # with-without, then without-with: what drifts falls on both arms alike.
            for turned in (True, False) if pair % 2 == 0 else (False, True):
                seconds = _timed(
                    session, executor, job, config, test_id, command, knob if turned else None, workdir, scratch
                )
                checkpoint()
                if seconds is None:
                    content.verdict = FAILED
                    content.reason = f"a run {'with' if turned else 'without'} the knob failed"
                    return content
                (content.with_s if turned else content.without_s).append(round(seconds, 6))
            judgement = compare_arms(content.with_s, content.without_s, rule, seed=job.screen_seed or 0)
            content.ratio, content.ratio_low, content.ratio_high = (
                judgement.ratio,
                judgement.ratio_low,
                judgement.ratio_high,
            )
            content.p_faster = judgement.p_faster
            if judgement.verdict == DIFFERENT:
                content.verdict = NOT_CONFIRMED if judgement.slower else CONFIRMED
                return content
            if judgement.verdict == SAME:
                content.verdict = NOT_CONFIRMED
                return content
            next_pair_s = 2 * max(content.with_s[-1], content.without_s[-1]) + (1.0 if test_id else 0.0)
            if not budget.fits(job, thresholds, next_pair_s):
                content.reason = f"the budget ended it after {pair + 1} pairs"
                return content
        content.reason = f"no decision in {rule.looks} pairs"
        return content
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _timed(
    session: Session,
    executor: Executor,
    job: Job,
    config: JobConfig,
    test_id: str | None,
    command: list[str],
    knob: Knob | None,
    workdir: Path,
    scratch: Path,
) -> float | None:
    """One run's time: the test's own duration, or the command's wall; None where it failed."""
    runs = sum(1 for run in config.runs if run.kind is RunKind.evidence)
    run_dir = scratch / f"{config.id}-{runs}"
    run_dir.mkdir()
    env = dict(knob.env) if knob is not None else {}
    if knob is not None and knob.shim is not None:
        env |= install_hook(run_dir / HOOK_DIR, executor.visible_path(run_dir, HOOK_DIR), knob.shim)
    try:
        measured = run_once(
            session,
            executor,
            config,
            command=[*command, *knob.args] if knob is not None else command,
            workdir=workdir,
            run_dir=run_dir,
            timeout_s=job.timeout_s,
            kind=RunKind.evidence,
            repetition=1 + runs,
            probe=PROBE,
            test_id=test_id,
            wrapping=Wrapping(env=env),
        )
    except BadInput:
        return None
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)  # its files are read: nothing of it is kept
    if measured.result.timed_out:
        return None
    if test_id is None:
        return measured.result.wall_s if measured.result.exit_code == 0 else None
    durations = [case.duration_s for case in measured.cases if case.test_id == test_id and case.outcome == "passed"]
    return durations[0] if durations else None


def describe(content: ConfirmContent) -> str:
    """The experiment in one line, as the report and the job page say it."""
    if content.verdict == FAILED:
        return f"not confirmed: {content.reason} ({content.knob} at {content.config})"
    with_s, without_s = _median(content.with_s), _median(content.without_s)
    measured = f"{_s(with_s)} instead of {_s(without_s)}" if with_s is not None and without_s is not None else ""
    interval = (
        f" (with/without {content.ratio:.2f}x [{content.ratio_low:.2f} .. {content.ratio_high:.2f}])"
        if content.ratio is not None and content.ratio_low is not None and content.ratio_high is not None
        else ""
    )
    pairs = f"{len(content.with_s)} pairs"
    if content.runs and content.runs_s is not None:
        # Its cost against the test's own time where it is slow (the arm without the knob).
        against = f", {content.runs_s / without_s:.0f}x the test's time" if without_s else ""
        pairs += f" ({content.runs} runs, {_s(content.runs_s)}{against})"
    if content.verdict == CONFIRMED:
        return f"confirmed: with {content.knob} at {content.config}, {measured}{interval}, {pairs}"
    if content.verdict == NOT_CONFIRMED:
        return f"not confirmed: with {content.knob} at {content.config}, {measured}{interval}, {pairs}"
    return f"undecided: with {content.knob} at {content.config}, {measured}{interval}: {content.reason}"


def _median_wall(config: JobConfig) -> float | None:
    """The configuration's timing median: the command's time without a knob."""
    return _median([run.wall_s for run in config.runs if run.kind is RunKind.timing and run.exit_code == 0])


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _s(seconds: float) -> str:
    return f"{seconds:.3f} s" if seconds < 10 else f"{seconds:.1f} s"
