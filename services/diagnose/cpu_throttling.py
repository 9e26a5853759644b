"""cpu_throttling: the program runs more in parallel than its CPU quota pays for.

The usual cause is parallelism sized to the visible cores (os.cpu_count()) rather than
to the quota: eight workers under a two-CPU quota burn the period's budget in a
fraction of it and then all stand still until the next period.

The program's CPU demand under the quota is (CPU time + throttled time) / wall time:
cgroup cpu.stat's throttled_time is summed over the CPUs whose run queues were held
back (test_timing_rules.py::test_demand_counts_throttled_time_per_cpu): CPU-seconds that runnable threads wanted and
did not get. One thread under cpus=0.5 wants 1 CPU, gets half and is held back the
other half: demand 1.0, slowed by exactly the quota's factor, which is physics and no
finding. Only a demand above both the quota and one CPU (by
``cpu_throttling_min_parallelism``) can be: more threads or processes than the quota
pays for.

Even then a count of throttled periods is no cost (docs/reference/findings.md). Two processes computing
under cpus=0.5 burn each period's budget in half of it and stand still for the rest,
yet take exactly their CPU time divided by the quota, as one process would: the
quota's share, physics that no pool size changes. What throttling costs is the wall
time beyond that share: the run under the quota against the useful CPU time of the
same work without a quota (the configuration without one whose CPU time is least)
over the quota, plus one throttling pause. CPU time inflated under the quota (threads
that spin or contend while rationed) shows there; CPU time that the same work spends on
the same cores without a quota is the parallel run's own, not the rationing's (two
pytest-xdist workers on two cores burn 2.6 CPU-seconds where one core needs 1.3: under
cpus=0.5 they burned 1.8 and took 3.6 s, their own CPU time over the quota;
test_timing_rules.py::test_cpu_time_a_parallel_run_spends_on_the_same_cores_without_a_quota_is_not_throttlings).
The finding fires on that cost, at
``cpu_throttling_min_s`` at least, and its share of the run sets the severity. Without a
configuration free of quotas to compare with, the time held back stands in for it.
"""

from __future__ import annotations

import statistics

from services.diagnose.context import RuleContext
from services.diagnose.findings import FindingDraft, graded
from services.diagnose.metrics import CpuThrottlingMetrics
from services.measure.cgroups import THROTTLE_PAUSE_S
from services.measure.configs import cpu_config
from services.models import JobConfig


def demand(user_s: float, sys_s: float, throttled_s: float, wall_s: float) -> float:
    """CPUs the program wanted, on average over its run."""
    return (user_s + sys_s + throttled_s) / wall_s if wall_s > 0 else 0.0


def _useful_cpu(context: RuleContext) -> tuple[float, float, str] | None:
    """(CPU seconds, wall seconds, label) of the work where no quota rations it: the
    configuration without a quota whose median CPU time is least."""
    found = []
    for config in context.job.configs:
        runs = context.timing_runs(config)
        if config.cpus is None and runs:
            cpu = statistics.median((run.user_s or 0.0) + (run.sys_s or 0.0) for run in runs)
            found.append((cpu, statistics.median(run.wall_s for run in runs), config.label))
    return min(found) if found else None


def _same_cores_cpu(context: RuleContext, quota: JobConfig) -> float | None:
    """Median CPU time of the work on the quota configuration's cores without a quota:
    the configuration with the same CPU set, or for a quota on every core (no CPU set) the
    widest configuration without a quota."""
    free = [c for c in context.job.configs if c.cpus is None and context.timing_runs(c)]
    if quota.cpuset is not None:
        same = [c for c in free if c.cpuset == quota.cpuset]
    else:
        widest = max((cpu_config(c).effective_cpus for c in free), default=None)
        same = [c for c in free if cpu_config(c).effective_cpus == widest]
    if not same:
        return None
    return statistics.median(
        (run.user_s or 0.0) + (run.sys_s or 0.0) for config in same for run in context.timing_runs(config)
    )


def check(context: RuleContext) -> list[FindingDraft]:
    limits = context.thresholds
    drafts = []
    useful = _useful_cpu(context)
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
        # Wall time held back: the per-CPU sum spread over the CPUs that wanted to run.
        held_s = statistics.median((run.throttled_s or 0.0) for run in runs) / max(1.0, wanted)
        if held_s < limits.cpu_throttling_min_s:
            continue
        if wanted < max(1.0, config.cpus) * limits.cpu_throttling_min_parallelism:
            continue  # one thread slowed by the quota's factor: physics, not a finding
        cost_s, beyond = held_s, ""
        if useful is not None:
            useful_cpu, useful_wall, useful_label = useful
            run_cpu = statistics.median((run.user_s or 0.0) + (run.sys_s or 0.0) for run in runs)
            # The CPU the parallel run spends anyway on these cores (up to what it spent
            # here) is no rationing's: only inflation beyond it counts against throttling.
            same_cores = _same_cores_cpu(context, config)
            work_cpu = max(useful_cpu, min(run_cpu, same_cores)) if same_cores is not None else useful_cpu
            expected = max(useful_wall, work_cpu / config.cpus) + THROTTLE_PAUSE_S
            cost_s = wall_s - expected
            if cost_s < limits.cpu_throttling_min_s:
                continue  # the quota's share of the work: physics, whatever the periods say
            beyond = (
                f" Its useful CPU time ({useful_cpu:.3f} s with {useful_label}) over the quota, plus one throttling "
                f"pause, explains {expected:.3f} s: throttling costs {cost_s:.3f} s beyond the quota's share"
                + (
                    f", with the CPU time itself inflated to {run_cpu:.3f} s under the quota"
                    if run_cpu >= 1.2 * useful_cpu
                    else ""
                )
                + "."
            )
        held_share = cost_s / wall_s if wall_s else 0.0
        severity = graded(held_share, limits.cpu_throttling_medium_share, limits.cpu_throttling_high_share)
        pools = max(1, int(config.cpus)) if config.cpus >= 1 else 1
        drafts.append(
            FindingDraft(
                kind="cpu_throttling",
                severity=severity,
                title=(
                    f"Runs {wanted:.1f} CPUs in parallel under a {config.cpus:g}-CPU quota: "
                    f"throttled in {share:.0%} of periods with {config.label}"
                ),
                detail=(
                    f"{throttled} of {periods} CFS periods throttled over {len(runs)} runs (cgroup cpu.stat); "
                    f"per run (median) {wall_s:.3f} s wall, of which about {held_s:.3f} s standing still "
                    f"({held_share:.0%}). It wanted {wanted:.1f} CPUs (CPU time plus throttled time, per wall "
                    f"second) against a quota of {config.cpus:g}: its threads or processes outnumber what the "
                    f"quota pays for, so they burn each period's budget early and wait out the rest. Size thread "
                    f"and process pools to the quota ({pools} here: read cpu.max or pass the quota in), not to "
                    f"os.cpu_count(), which counts the host's cores.{beyond}"
                ),
                config_label=config.label,
                metrics=CpuThrottlingMetrics(
                    throttled_share=share,
                    nr_periods=periods,
                    nr_throttled=throttled,
                    median_held_s=held_s,
                    median_throttled_s=statistics.median((run.throttled_s or 0.0) for run in runs),
                    median_wall_s=wall_s,
                    cpu_demand=wanted,
                    quota_cpus=config.cpus,
                    # What throttling costs beyond the quota's share (the time held back
                    # where no configuration runs without a quota): the cause's weight.
                    accounts_s=cost_s,
                ),
            )
        )
    return drafts
