"""What a job will cost: its whole wall time, created to finished, before and as it runs
(docs/explanations/cost-model.md, "What a job will cost"; tests/unit/services/jobs/test_forecast.py).

- Before any run: the median wall time of the same command's last finished jobs of the
  same kind in the project (``history``), else nothing: unknown until the suite's first run.
- After the suite's first untraced run (the survey's or the gate's, in the configuration
  with the most CPUs): that run and the plan. Each configuration's whole run is the first
  run stretched by its CPUs: a run that kept ``u`` CPUs busy (its CPU time over its wall
  time) takes about ``u / e`` times as long on ``e`` CPUs when ``u > e`` (a quota of 0.5
  CPU doubles a CPU-bound run), never less. Then the first round (one run a
  configuration), the rounds after it (``repeat`` of the whole command; a surveyed suite's
  focused rounds, ``focus_futility_runs`` of them, each the start-up and a tenth of the
  tests until a focused run says what it costs), and the drill's evidence runs.
- As it goes: the time so far, plus what is left of that plan, each remaining run at the
  cost of the last run of its kind in its configuration where there is one; what is left
  is capped by what is left of the budget (services/measure/budget.py: no step starts
  that does not fit), plus lagtrace's own time for each run left (``TOLL_S``) and its end
  (``FINISH_S``).

A gate is forecast as a matrix job with the gate's run in front (the first gates cost a
matrix job: docs/guides/github.md) until the command has a finished gate; then as its
gates cost against their suite's time.

What it leaves out: early stops (a configuration whose verdict settles after
``min_repetitions`` runs, the futility stop's cleared tests) make the screen cheaper than
planned; the survey's kept tests are a guess (a tenth) until the first focused run;
the drill's runs are a guess until it runs (it may drill nothing), and the knob's
confirmation runs after it (services/jobs/confirm_phase.py) are not predicted; a pull request's base
screened beside its head, shards on several nodes, a service step's checkout and image
preparation after the first (the drill's), runs retaken because a neighbour disturbed
them are not predicted either: each is counted once it ran.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.measure import budget
from services.measure.configs import cpu_config
from services.measure.drill import START_UP_GUESS_S
from services.measure.pytest_command import is_pytest
from services.models import Job, JobConfig, JobKind, JobStatus, Run, RunKind
from services.thresholds import Thresholds

# The same command's finished jobs a forecast before any run reads.
HISTORY_JOBS = 5
# A surveyed suite's focused screen reruns this share of its tests' time, until a focused
# run measured it (the 60 s suite of docs/measurements/suites.md kept far fewer).
KEPT_SHARE = 0.1
# The drill's evidence runs of a whole command, per configuration of its pair (the slow
# and the fast), until it runs: strace, py-spy, a core, faulthandler's as measured on
# examples/handoff.py, the others skipped as needless (services/measure/drill.py).
EVIDENCE_RUNS_WHOLE = 4
# A surveyed suite's drill traces a few tests, narrowed: its evidence runs as a share of
# the suite's time (the planted hand-off of a 60 s suite: 6 evidence runs, 24 s).
DRILL_SHARE = 0.4
# lagtrace's own time for each run (starting it, storing it and its test results) and at
# the end (the drill's choice, the rules, the report): measured on the local executor,
# docs/explanations/cost-model.md.
TOLL_S = 0.15
FINISH_S = 1.0

FIRST_KINDS = (RunKind.survey, RunKind.warmup, RunKind.timing)
ROUND_KINDS = (RunKind.timing, RunKind.focus)


@dataclass(frozen=True)
class Past:
    """One finished job of the same command: its whole wall time and its suite's."""

    wall_s: float
    suite_s: float | None


@dataclass(frozen=True)
class Forecast:
    """``total_s``: the job's predicted wall time, created to finished (None: unknown until
    the suite's first run); ``basis``: "history", "first run" or "unknown"."""

    total_s: float | None
    suite_s: float | None
    basis: str

    def left_s(self, elapsed_s: float) -> float | None:
        return None if self.total_s is None else max(0.0, self.total_s - elapsed_s)

    @property
    def ratio(self) -> float | None:
        return self.total_s / self.suite_s if self.total_s is not None and self.suite_s else None


UNKNOWN = Forecast(None, None, "unknown")


def history(session: Session, job: Job) -> list[Past]:
    """The same command's last finished jobs of the same kind in the project, newest first."""
    rows = session.scalars(
        select(Job)
        .where(
            Job.project_id == job.project_id,
            Job.id < job.id,
            Job.kind == job.kind,
            Job.status == JobStatus.done,
            Job.finished_at.is_not(None),
        )
        .order_by(Job.id.desc())
        .limit(4 * HISTORY_JOBS)
    )
    past = []
    for other in rows:
        if other.command != job.command:
            continue
        wall = budget.job_wall_s(other)
        suite = budget.untraced_suite_s(other)
        if wall is not None:
            past.append(Past(wall, suite[0] if suite else None))
        if len(past) == HISTORY_JOBS:
            break
    return past


def first_of_project(session: Session, job: Job) -> bool:
    """Whether the project has no finished job before this one: its first matrix is the expensive one."""
    earlier = session.scalar(
        select(Job.id).where(Job.project_id == job.project_id, Job.id < job.id, Job.status == JobStatus.done).limit(1)
    )
    return earlier is None


def first_run(job: Job) -> Run | None:
    """The suite's first untraced whole run that ran to its end, in the configuration with
    the most CPUs if it has one (the gate's run, the survey's or a command's warm-up)."""
    widest = budget.widest(job)
    ordered = sorted(job.configs, key=lambda c: (c is not widest, c.position))
    # A run the census traced stands in only for a job of one configuration (its only one);
    # a run under a quota only where every configuration has one: it cannot show more CPUs
    # busy than its quota, so it would not stretch to the others.
    unquoted = [c for c in ordered if c.cpus is None] or ordered
    for traced in (False, True) if len(job.configs) == 1 else (False,):
        for config in unquoted:
            for run in config.runs:
                first = run.kind in FIRST_KINDS or (run.kind is RunKind.gate and run.repetition == 0)
                if first and run.traced is traced and not run.timed_out and run.wall_s > 0:
                    return run
    return None


def stretch(run: Run, cpus: float) -> float:
    """How much longer than ``run`` the same run takes on ``cpus`` CPUs: its CPU time over
    its wall time is how many it kept busy; fewer stretch it, more never shorten it."""
    if run.wall_s <= 0 or math.isinf(cpus) or cpus <= 0:
        return 1.0
    busy = (run.user_s + run.sys_s) / run.wall_s
    return max(1.0, busy / cpus)


def whole_run_s(job: Job, first: Run) -> dict[str, float]:
    """Each configuration's whole run, predicted from ``first`` (brought back to all the
    CPUs the suite could use when it ran under fewer)."""
    own = stretch(first, cpu_config(first.config).effective_cpus)
    return {c.label: first.wall_s / own * stretch(first, cpu_config(c).effective_cpus) for c in job.configs}


def _last(config: JobConfig, kinds: tuple[RunKind, ...]) -> Run | None:
    runs = [run for run in config.runs if run.kind in kinds and not run.traced]
    return runs[-1] if runs else None


def predict(
    job: Job,
    thresholds: Thresholds,
    past: list[Past],
    now: dt.datetime | None = None,
    startup_s: float | None = None,
) -> Forecast:
    """The job's forecast now (see the module's docstring). ``startup_s``: the first run's
    wall time less its tests' durations, when the caller knows it (a surveyed suite)."""
    first = first_run(job)
    past_wall = [p.wall_s for p in past]
    past_suite = [p.suite_s for p in past if p.suite_s]
    if first is None:
        if not past_wall:
            return UNKNOWN
        return Forecast(statistics.median(past_wall), statistics.median(past_suite) if past_suite else None, "history")
    whole = whole_run_s(job, first)
    suite = whole.get(first.config.label, first.wall_s)
    elapsed = budget.job_wall_s(job, now) or 0.0
    if job.status in (JobStatus.done, JobStatus.failed, JobStatus.cancelled):
        return Forecast(elapsed, suite, "first run")
    gated = job.kind is JobKind.gate and past
    if gated:
        ratios = [p.wall_s / p.suite_s for p in past if p.suite_s]
        if ratios:
            # A gate once history holds: as the command's gates cost against their suite.
            return Forecast(max(elapsed, statistics.median(ratios) * suite), suite, "first run")
    left_runs = _left_runs(job, thresholds, whole, suite, startup_s)
    left_s = min(sum(left_runs), max(0.0, budget.remaining_s(job, thresholds)))
    total = elapsed + left_s + TOLL_S * len(left_runs) + FINISH_S
    return Forecast(total, suite, "first run")


def _left_runs(
    job: Job, thresholds: Thresholds, whole: dict[str, float], suite_s: float, startup_s: float | None
) -> list[float]:
    """The predicted wall time of each run the plan has left."""
    runs = [run for config in job.configs for run in config.runs]
    drilling = any(run.kind is RunKind.evidence and run.shard is None for run in runs)
    surveyed = is_pytest(job.command) and (
        any(run.kind is RunKind.survey for run in runs) or _tests_in(job) >= thresholds.focus_min_tests
    )
    left: list[float] = []
    for config in job.configs:
        if not any(run.kind in FIRST_KINDS for run in config.runs):
            left.append(whole[config.label])
    if not drilling:
        rounds = min(job.repeat, thresholds.focus_futility_runs or job.repeat) if surveyed else job.repeat
        for config in job.configs:
            done = sum(1 for run in config.runs if run.kind in ROUND_KINDS)
            last = _last(config, ROUND_KINDS)
            if last is not None:
                each = last.wall_s
            elif surveyed:
                scale = whole[config.label] / suite_s if suite_s else 1.0
                start = min(startup_s if startup_s is not None else 0.0, suite_s) * scale
                each = start + KEPT_SHARE * (whole[config.label] - start)
            else:
                each = whole[config.label]
            left.extend([each] * max(0, rounds - done))
    if job.probes != []:
        done_s = sum(run.wall_s for run in runs if run.kind is RunKind.evidence and run.shard is None)
        if surveyed:
            drill = [DRILL_SHARE * suite_s]
        else:
            pair = [max(whole.values()), min(whole.values())] if len(whole) > 1 else list(whole.values())
            # A pytest suite's evidence runs are narrowed to a test, each with its start-up.
            extra = START_UP_GUESS_S if is_pytest(job.command) else 0.0
            drill = [each + extra for each in pair for _ in range(EVIDENCE_RUNS_WHOLE)]
        rest = max(0.0, sum(drill) - done_s)
        count = max(0, len(drill) - sum(1 for run in runs if run.kind is RunKind.evidence))
        left.extend([rest / count] * count if count else ([rest] if rest else []))
    return left


def _tests_in(job: Job) -> int:
    first = first_run(job)
    return len(first.test_results) if first is not None else 0


def startup_of(run: Run) -> float | None:
    """A pytest run's wall time less its tests' durations: what a narrowed rerun pays too."""
    if not run.test_results:
        return None
    return max(0.0, run.wall_s - sum(result.duration_s for result in run.test_results))


def update(
    job: Job,
    thresholds: Thresholds,
    past: list[Past],
    now: dt.datetime | None = None,
    memo: dict[int, float | None] | None = None,
) -> Forecast:
    """Store the forecast on the job (``predicted_s``, ``predicted_at``; the first one made
    from a run, ``first_predicted_s``, is kept: beside the actual time it says how good the
    forecast was). ``memo``: the first run's start-up by run id, across calls."""
    first = first_run(job)
    startup = None
    if first is not None and is_pytest(job.command):
        memo = {} if memo is None else memo
        if first.id not in memo:
            memo[first.id] = startup_of(first)
        startup = memo[first.id]
    made = predict(job, thresholds, past, now, startup)
    if made.total_s is not None:
        job.predicted_s = round(made.total_s, 3)
        job.predicted_at = now or dt.datetime.now(dt.UTC)
        if made.basis == "first run" and job.first_predicted_s is None:
            job.first_predicted_s = job.predicted_s
    return made


def sentence(made: Forecast, elapsed_s: float) -> str:
    """One line for the CLI and the check run: the prediction, against the suite, and what is left."""
    if made.total_s is None:
        return "predicted cost unknown until the suite's first run"
    against = f" ({made.ratio:.1f}x the suite's {made.suite_s:.2f} s)" if made.ratio and made.suite_s else ""
    left = made.left_s(elapsed_s)
    return f"predicted about {made.total_s:.0f} s{against}, about {left:.0f} s left"


def suite_of(job: Job) -> float | None:
    """The suite's own time the forecast reads: its first untraced run, on all the CPUs it could use."""
    first = first_run(job)
    if first is None:
        return None
    return first.wall_s / stretch(first, cpu_config(first.config).effective_cpus)


def view(session: Session, job: Job, now: dt.datetime | None = None) -> dict[str, object]:
    """The stored forecast as the API and the job page show it: the prediction (and the first
    one made from a run), the time left while the job runs, the suite's time it is a multiple
    of, the actual time once finished, and whether it is the project's first matrix job."""
    finished = job.status in (JobStatus.done, JobStatus.failed, JobStatus.cancelled)
    elapsed = budget.job_wall_s(job, now)
    suite = suite_of(job)
    predicted = job.predicted_s
    return {
        "predicted_s": predicted,
        "predicted_at": job.predicted_at.isoformat() if job.predicted_at else None,
        "first_predicted_s": job.first_predicted_s,
        "suite_s": round(suite, 3) if suite is not None else None,
        "ratio": round(predicted / suite, 2) if predicted is not None and suite else None,
        "left_s": (
            round(max(0.0, predicted - (elapsed or 0.0)), 1) if predicted is not None and not finished else None
        ),
        "actual_s": round(elapsed, 3) if finished and elapsed is not None else None,
        "first_matrix": job.kind is JobKind.matrix and first_of_project(session, job),
    }


def checkpointing(
    session: Session,
    thresholds: Thresholds,
    job: Job,
    checkpoint: Callable[[], None],
    progress: Callable[[str], None] = lambda line: None,
) -> Callable[[], None]:
    """``checkpoint``, with the job's forecast brought up to date first: the screen, the
    survey, the gate and the drill call it after each stored run (services/jobs/engine.py),
    so the prediction every reader sees is the one made after the latest run. The first one
    made from a run of the suite is said once on ``progress`` (`lagtrace run` prints it)."""
    past = history(session, job)
    memo: dict[int, float | None] = {}

    def wrapped() -> None:
        if job.status is JobStatus.running:
            said = job.first_predicted_s is not None
            made = update(job, thresholds, past, memo=memo)
            if not said and job.first_predicted_s is not None:
                progress(f"forecast after the suite's first run: {sentence(made, budget.job_wall_s(job) or 0.0)}")
        checkpoint()

    return wrapped
