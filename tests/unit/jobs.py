"""Jobs built in memory (no database): the rules read only the objects."""

from __future__ import annotations

import itertools

from services.models import Evidence, Job, JobConfig, JobKind, Run, RunKind, TestResult

_ids = itertools.count(1)


def run(
    wall_s: float,
    *,
    kind: RunKind = RunKind.timing,
    exit_code: int = 0,
    timed_out: bool = False,
    user_s: float | None = None,
    sys_s: float = 0.0,
    tests: dict[str, float] | None = None,
    outcomes: dict[str, str] | None = None,
    nr_periods: int | None = None,
    nr_throttled: int | None = None,
    throttled_s: float | None = None,
    output_tail: str | None = None,
    probe: str | None = None,
    test_id: str | None = None,
    repetition: int = 1,
    foreign_cpus: float = 0.0,
    run_delay_s: float | None = None,
) -> Run:
    return Run(
        id=next(_ids),
        kind=kind,
        repetition=repetition,
        wall_s=wall_s,
        user_s=wall_s if user_s is None else user_s,
        sys_s=sys_s,
        max_rss_kb=10_000,
        voluntary_ctx_switches=10,
        involuntary_ctx_switches=1,
        exit_code=exit_code,
        timed_out=timed_out,
        nr_periods=nr_periods,
        nr_throttled=nr_throttled,
        throttled_s=throttled_s,
        output_tail=output_tail,
        probe=probe,
        test_id=test_id,
        foreign_cpus=foreign_cpus,
        run_delay_s=run_delay_s,
        test_results=[
            TestResult(test_id=t, duration_s=d, outcome=(outcomes or {}).get(t, "passed"))
            for t, d in (tests or {}).items()
        ],
    )


def job(
    configs: dict[str, list[Run]],
    *,
    cpus: dict[str, float] | None = None,
    cpusets: dict[str, str] | None = None,
    seed: int = 1,
) -> Job:
    # kind's column default applies only when a job is stored; these never are.
    built = Job(
        id=next(_ids),
        command=["python3", "prog.py"],
        executor="local",
        repeat=5,
        notes=[],
        screen_seed=seed,
        kind=JobKind.matrix,
    )
    built.configs = [
        JobConfig(
            id=next(_ids),
            position=i,
            label=label,
            cpus=(cpus or {}).get(label),
            cpuset=(cpusets or {}).get(label),
            runs=runs,
        )
        for i, (label, runs) in enumerate(configs.items())
    ]
    return built


def evidence(of: Run, kind: str = "strace", test_id: str | None = None) -> Evidence:
    return Evidence(id=next(_ids), run_id=of.id, kind=kind, test_id=test_id, content={}, artifacts=[])
