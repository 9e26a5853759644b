"""Jobs stored with one cheap, deterministic finding (off_cpu_wait), for triage tests."""

from __future__ import annotations

from services.diagnose.diagnose import diagnose
from services.jobs.lifecycle import create_job
from services.measure.configs import CpuConfig
from services.models import Finding, Job, Run, RunKind
from services.thresholds import Thresholds


def waiting_job(session, project: str = "octo/demo") -> Job:
    """A job whose runs wait 1.5 s on 0.03 s of CPU: one off_cpu_wait finding."""
    job = create_job(
        session,
        project=project,
        command=["python3", "steady.py"],
        configs=[CpuConfig(label="cpuset=0", cpuset=(0,))],
        executor="local",
        workdir=None,
        repeat=5,
        timeout_s=None,
    )
    for repetition in range(1, 6):
        session.add(
            Run(
                config=job.configs[0],
                kind=RunKind.timing,
                repetition=repetition,
                wall_s=1.5 + repetition * 0.001,
                user_s=0.02,
                sys_s=0.01,
                max_rss_kb=10_000,
                voluntary_ctx_switches=5,
                involuntary_ctx_switches=0,
                exit_code=0,
            )
        )
    session.flush()
    return job


def the_finding(session, job: Job) -> Finding:
    [found] = [f for f in diagnose(session, job, Thresholds()) if f.kind == "off_cpu_wait"]
    return found
