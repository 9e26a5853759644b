"""cpu_throttling: the program runs more in parallel than its CPU quota pays for.

The usual cause is parallelism sized to the visible cores (os.cpu_count(), OpenBLAS's
pool) rather than to the quota: eight workers under a two-CPU quota burn the period's
budget in a fraction of it and then all stand still until the next period.

The program's CPU demand under the quota is (CPU time + throttled time) / wall time:
cgroup cpu.stat's throttled_time is summed over the CPUs whose run queues were held
back (test_timing_rules.py::test_demand_counts_throttled_time_per_cpu): CPU-seconds that
runnable threads wanted and did not get. One thread under cpus=0.5 wants 1 CPU, gets
half and is held back the other half: demand 1.0, slowed by exactly the quota's factor,
which is physics and no finding. Only a demand above both the quota and one CPU (by
``cpu_throttling_min_parallelism``) can be: more threads or processes than the quota
pays for.

Even then a count of throttled periods is no cost (docs/reference/findings.md). Two
processes computing under cpus=0.5 burn each period's budget in half of it and stand
still for the rest, yet take exactly their work divided by the quota, as one process
would: the quota's share, physics that no pool size changes. What throttling costs is
the wall time beyond that share, and the share is taken from the program's useful work,
not from the parallelism it happened to use. Method: ``useful_work.METHOD``
(services/measure/useful_work.py): the CPU time that bought speedup, measured where the
capacity is known (the narrowest configuration without a quota), bounded on wider ones
by speedup x busy CPUs x wall; CPU beyond it is spinning. The quota's share is then the
narrowest run's time off every CPU plus that work over the quota, at least the fastest
run without a quota, plus one throttling pause (services/measure/cgroups.py).

Measured here (docs/reference/findings.md): an OpenBLAS pool of two threads
(examples/corpus/numpy_blas_pool) took 1.24 s on one core and 1.04 s on two with
2.0 CPU-s (1.2x for 2.0 CPUs: 0.8 CPU-s of spinning), and 4.26 s under cpus=0.5, where
its 1.24 CPU-s of work explain 2.6 s: 1.65 s beyond the quota's share. Two pytest-xdist
workers took 1.15 s on one core (the two workers already share it) and 2.49 s under
cpus=0.5, where their work explains 2.42 s: 3 % of the run, within what two
configurations' medians differ by, and ``cpu_throttling_min_share`` keeps it quiet.

The finding fires on that cost, at ``cpu_throttling_min_s`` and
``cpu_throttling_min_share`` of the run at least, and its share of the run sets the
severity, one step lower where other processes kept the machine busy during one side
of the comparison only (services/diagnose/neighbours.py: CPU time measured beside other
work is no measure of the work). Without a configuration free of quotas to compare
with, the time held back stands in for the cost.
"""

from __future__ import annotations

import statistics

from services.diagnose.context import RuleContext
from services.diagnose.findings import FindingDraft, Severity, graded
from services.diagnose.metrics import CpuThrottlingMetrics
from services.diagnose.neighbours import confounded
from services.measure.cgroups import THROTTLE_PAUSE_S
from services.measure.configs import cpu_config
from services.measure.useful_work import METHOD, Measured, UsefulWork, useful_work
from services.models import JobConfig, Run

LOWER = {Severity.high: Severity.medium, Severity.medium: Severity.low, Severity.low: Severity.low}


def demand(user_s: float, sys_s: float, throttled_s: float, wall_s: float) -> float:
    """CPUs the program wanted, on average over its run."""
    return (user_s + sys_s + throttled_s) / wall_s if wall_s > 0 else 0.0


def _cpu(run: Run) -> float:
    return (run.user_s or 0.0) + (run.sys_s or 0.0)


def _measured(context: RuleContext) -> list[Measured]:
    """Every configuration without a quota, by its timing runs' medians."""
    found = []
    for config in context.job.configs:
        runs = context.timing_runs(config)
        if config.cpus is None and runs:
            found.append(
                Measured(
                    config.label,
                    cpu_config(config).effective_cpus,
                    statistics.median(run.wall_s for run in runs),
                    statistics.median(_cpu(run) for run in runs),
                )
            )
    return found


def _widest(work: UsefulWork, measured: list[Measured]) -> Measured | None:
    wider = [m for m in measured if m.label in work.speedup]
    return max(wider, key=lambda m: (m.cores, m.cpu_s)) if wider else None


def check(context: RuleContext) -> list[FindingDraft]:
    limits = context.thresholds
    drafts = []
    measured = _measured(context)
    work = useful_work(measured)
    for config in context.job.configs:
        runs = [run for run in context.timing_runs(config) if run.nr_periods]
        if not runs or config.cpus is None:
            continue
        periods = sum(run.nr_periods or 0 for run in runs)
        throttled = sum(run.nr_throttled or 0 for run in runs)
        share = throttled / periods
        if share < limits.cpu_throttling_share:
            continue
        wall_s = statistics.median(run.wall_s for run in runs)
        wanted = statistics.median(demand(run.user_s, run.sys_s, run.throttled_s or 0.0, run.wall_s) for run in runs)
        throttled_s = statistics.median((run.throttled_s or 0.0) for run in runs)
        # Wall time held back: the per-CPU sum spread over the CPUs that wanted to run.
        held_s = throttled_s / max(1.0, wanted)
        if held_s < limits.cpu_throttling_min_s:
            continue
        if wanted < max(1.0, config.cpus) * limits.cpu_throttling_min_parallelism:
            continue  # one thread slowed by the quota's factor: physics, not a finding
        cost_s, expected_s, beyond, neighbours = held_s, None, "", None
        widest = _widest(work, measured) if work is not None else None
        if work is not None:
            run_cpu = statistics.median(_cpu(run) for run in runs)
            fastest = min(m.wall_s for m in measured)
            expected_s = max(fastest, work.waiting_s + work.cpu_s / config.cpus) + THROTTLE_PAUSE_S
            cost_s = wall_s - expected_s
            if cost_s < limits.cpu_throttling_min_s or cost_s < limits.cpu_throttling_min_share * wall_s:
                continue  # the quota's share of the work: physics, whatever the periods say
            # CPU time beyond the work by more than two medians differ: inflated under the quota.
            beyond = _beyond(work, widest, config, expected_s, cost_s, run_cpu, limits.cpu_throttling_min_share)
            neighbours = confounded([run.foreign_cpus for run in runs], _loads(context, work.label))
            if neighbours:
                beyond += f" {neighbours.describe(config.label, work.label)}."
        held_share = cost_s / wall_s if wall_s else 0.0
        severity = graded(held_share, limits.cpu_throttling_medium_share, limits.cpu_throttling_high_share)
        if neighbours:
            severity = LOWER[severity]
        pools = max(1, int(config.cpus)) if config.cpus >= 1 else 1
        drafts.append(
            FindingDraft(
                kind="cpu_throttling",
                severity=severity,
                title=(
                    f"Runs {wanted:.1f} CPUs in parallel under a {config.cpus:g}-CPU quota: "
                    f"{cost_s:.3f} s beyond the quota's share, throttled in {share:.0%} of periods "
                    f"with {config.label}"
                ),
                detail=(
                    f"{throttled} of {periods} CFS periods throttled over {len(runs)} runs (cgroup cpu.stat); "
                    f"per run (median) {wall_s:.3f} s wall, throttled {throttled_s:.3f} s (summed over CPUs), "
                    f"about {held_s:.3f} s of it standing still. It wanted {wanted:.1f} CPUs (CPU time plus "
                    f"throttled time, per wall second) against a quota of {config.cpus:g}: its threads or "
                    f"processes outnumber what the quota pays for, so they burn each period's budget early and "
                    f"wait out the rest. Size thread and process pools to the quota ({pools} here: read cpu.max "
                    f"or pass the quota in; OPENBLAS_NUM_THREADS or threadpoolctl for a BLAS pool), not to "
                    f"os.cpu_count(), which counts the host's cores.{beyond}"
                ),
                config_label=config.label,
                metrics=CpuThrottlingMetrics(
                    throttled_share=share,
                    nr_periods=periods,
                    nr_throttled=throttled,
                    median_held_s=held_s,
                    median_throttled_s=throttled_s,
                    median_wall_s=wall_s,
                    cpu_demand=wanted,
                    quota_cpus=config.cpus,
                    # What the run spent beyond the quota's share of its useful work (the
                    # time held back where no configuration runs without a quota).
                    accounts_s=cost_s,
                    useful_cpu_s=work.cpu_s if work else None,
                    useful_config=work.label if work else None,
                    expected_s=expected_s,
                    spinning_s=work.spinning_s[widest.label] if work and widest else None,
                    speedup=work.speedup[widest.label] if work and widest else None,
                    method=METHOD if work else None,
                ),
            )
        )
    return drafts


def _loads(context: RuleContext, label: str) -> list[float]:
    config = next(c for c in context.job.configs if c.label == label)
    return [run.foreign_cpus for run in context.timing_runs(config)]


def _beyond(
    work: UsefulWork,
    widest: Measured | None,
    config: JobConfig,
    expected_s: float,
    cost_s: float,
    run_cpu: float,
    inflation: float,
) -> str:
    spun = ""
    if widest is not None and work.spinning_s[widest.label] > 0:
        spun = (
            f" With {widest.label} it burned {widest.cpu_s:.3f} CPU-s ({widest.busy:.1f} CPUs) for a "
            f"{work.speedup[widest.label]:.1f}x speedup over {work.narrowest.label}: "
            f"{work.spinning_s[widest.label]:.3f} CPU-s of it bought no progress (spinning), and under the "
            f"quota spinning is paid for in throttled time."
        )
    return (
        f" Its useful work ({work.cpu_s:.3f} CPU-s, measured with {work.label}) over the {config.cpus:g}-CPU quota, "
        f"plus one throttling pause, explains {expected_s:.3f} s: the run spent {cost_s:.3f} s beyond the "
        f"quota's share"
        + (
            f", with the CPU time itself inflated to {run_cpu:.3f} s under the quota"
            if run_cpu >= (1 + inflation) * work.cpu_s
            else f", with {run_cpu:.3f} CPU-s burned under the quota"
        )
        + f".{spun}"
    )
