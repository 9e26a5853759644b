"""Fill a lagtrace database with a realistic history for the dashboard benchmark:
by default 10,000 jobs over 4 projects, 10 timing runs each (100,000 runs) in two CPU
configurations, and 2 findings per job recurring over a few hundred fingerprints.

    .venv/bin/python -m tests.bench.seed_dashboard --database-url URL [--jobs 10000]

The database must be migrated (`lagtrace migrate`). Rows go in with multi-row inserts
in batches, so seeding takes seconds, not minutes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import time

from sqlalchemy import insert, select, text
from sqlalchemy.orm import Session

from services.db import make_engine
from services.diagnose.findings import fingerprint
from services.jobs.lifecycle import get_or_create_project
from services.models import Finding, Job, JobConfig, Run
from services.settings import Settings

PROJECTS = ("octo/api", "octo/web", "octo/worker", "octo/cli")
KINDS = (("cpu_sensitivity", "high"), ("futex_storm", "medium"), ("busy_polling", "low"))
TESTS_PER_PROJECT = 60
BATCH = 2000


def _batched(session: Session, model, rows: list[dict]) -> None:
    for start in range(0, len(rows), BATCH):
        session.execute(insert(model), rows[start : start + BATCH])


def seed(
    session: Session, *, jobs: int = 10_000, runs_per_job: int = 10, findings_per_job: int = 2, seed_value: int = 7
) -> dict[str, int]:
    """Insert the history; returns the row counts. The caller commits."""
    rng = random.Random(seed_value)
    projects = [get_or_create_project(session, name) for name in PROJECTS]
    first_id = (session.scalar(select(Job.id).order_by(Job.id.desc()).limit(1)) or 0) + 1
    start = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    job_rows, config_rows, run_rows, finding_rows = [], [], [], []
    config_id = (session.scalar(select(JobConfig.id).order_by(JobConfig.id.desc()).limit(1)) or 0) + 1
    per_config = runs_per_job // 2
    for n in range(jobs):
        job_id = first_id + n
        project = projects[n % len(projects)]
        created = start + dt.timedelta(minutes=30 * n)
        job_rows.append(
            {
                "id": job_id,
                "project_id": project.id,
                "status": "done",
                "source": "github",
                "command": ["python3", "-m", "pytest", "tests"],
                "executor": "docker",
                "repeat": per_config,
                "notes": [],
                "created_at": created,
                "started_at": created,
                "finished_at": created + dt.timedelta(minutes=3),
            }
        )
        for position, label in enumerate(("cpuset=0", "cpuset=0-1")):
            config_rows.append(
                {"id": config_id, "job_id": job_id, "position": position, "label": label, "cpuset": label.split("=")[1]}
            )
            base = 0.3 if position == 0 else 0.3 * rng.uniform(1, 40)
            for repetition in range(per_config):
                wall = base * rng.uniform(0.95, 1.1)
                run_rows.append(
                    {
                        "config_id": config_id,
                        "kind": "timing",
                        "repetition": repetition + 1,
                        "wall_s": wall,
                        "user_s": wall * 0.8,
                        "sys_s": 0.02,
                        "max_rss_kb": 40000,
                        "voluntary_ctx_switches": rng.randint(100, 9000),
                        "involuntary_ctx_switches": 50,
                        "exit_code": 0,
                        "timed_out": False,
                        "foreign_cpus": 0.0,
                        "started_at": created,
                    }
                )
            config_id += 1
        for _ in range(findings_per_job):
            kind, severity = rng.choice(KINDS)
            test = f"tests/test_mod{rng.randrange(TESTS_PER_PROJECT)}.py::test_case"
            ratio = rng.uniform(2, 90) if kind == "cpu_sensitivity" else None
            finding_rows.append(
                {
                    "job_id": job_id,
                    "kind": kind,
                    "severity": severity,
                    "title": f"{test} {kind.replace('_', ' ')}",
                    "detail": "seeded",
                    "config_label": "cpuset=0-1",
                    "test_id": test,
                    "metrics": {"ratio": ratio} if ratio else {},
                    "evidence_ids": [],
                    "fingerprint": fingerprint(project.name, kind, test),
                    "status": rng.choice(("new", "new", "new", "acknowledged", "muted")),
                    "regression": False,
                    "created_at": created,
                }
            )
    _batched(session, Job, job_rows)
    _batched(session, JobConfig, config_rows)
    _batched(session, Run, run_rows)
    _batched(session, Finding, finding_rows)
    if session.bind.dialect.name == "postgresql":
        # Ids were given explicitly (runs and configs refer to them): move the sequences
        # past them, or the next job the service stores would collide.
        for table in ("jobs", "job_configs"):
            session.execute(
                text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")
            )
    return {"jobs": len(job_rows), "configs": len(config_rows), "runs": len(run_rows), "findings": len(finding_rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--runs-per-job", type=int, default=10)
    args = parser.parse_args()
    engine = make_engine(Settings(database_url=args.database_url))
    started = time.perf_counter()
    with Session(engine) as session:
        counts = seed(session, jobs=args.jobs, runs_per_job=args.runs_per_job)
        session.commit()
    if engine.dialect.name == "postgresql":
        with engine.connect() as connection:
            connection.exec_driver_sql("ANALYZE")  # fresh statistics, as autovacuum would make them
            connection.commit()
    engine.dispose()
    print(f"seeded {counts} in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
