"""Fill a lagtrace database with a realistic history for the dashboard benchmark:
by default 10,000 jobs over 4 projects, 10 timing runs each (100,000 runs) in two CPU
configurations, 10 test results per run (1,000,000), 2 findings per job recurring over
a few hundred fingerprints, and one more job of a 5,000-test suite (a survey of the whole
suite per configuration, 20 tests rerun in its focused screen, 3 of them flagged).

    .venv/bin/python -m tests.bench.seed_dashboard --database-url URL [--jobs 10000]

The database must be migrated (`lagtrace migrate`). Jobs, runs and findings go in with
multi-row inserts in batches, test results with one INSERT ... SELECT over
generate_series per table, so seeding takes seconds, not minutes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import time

from sqlalchemy import insert, select, text
from sqlalchemy.orm import Session

from services.db import make_engine
from services.diagnose import inbox
from services.diagnose.findings import fingerprint
from services.jobs.lifecycle import get_or_create_project
from services.models import Finding, Job, JobConfig, JobSource, Run
from services.settings import Settings

PROJECTS = ("octo/api", "octo/web", "octo/worker", "octo/cli")
KINDS = (("cpu_sensitivity", "high"), ("futex_storm", "medium"), ("busy_polling", "low"))
TESTS_PER_PROJECT = 60
TESTS_PER_RUN = 10
BATCH = 2000
# The big job: a suite of this many tests, the survey's one run per configuration, then
# FOCUSED tests rerun together REPEAT times per configuration, FLAGGED of them found slower.
SUITE_TESTS = 5000
FOCUSED = 20
FLAGGED = 3
REPEAT = 5


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
    results = 0
    if session.bind.dialect.name == "postgresql":
        # Each run timed TESTS_PER_RUN of the project's tests, a share of its wall time each.
        results = session.execute(
            text(
                "INSERT INTO test_results (run_id, test_id, duration_s, outcome, line) "
                "SELECT r.id, 'tests/test_mod' || ((c.job_id % 6) * :per + g) || '.py::test_case', "
                "r.wall_s / :per * (0.5 + random()), 'passed', 10 + g "
                "FROM runs r JOIN job_configs c ON c.id = r.config_id CROSS JOIN generate_series(0, :per - 1) g "
                "WHERE c.job_id >= :first"
            ),
            {"per": TESTS_PER_RUN, "first": first_id},
        ).rowcount
        big_id = first_id + jobs
        results += _suite_job(session, projects[0], big_id, config_id, start + dt.timedelta(minutes=30 * jobs))

        # Ids were given explicitly (runs and configs refer to them): move the sequences
        # past them, or the next job the service stores would collide.
        # The problems' sums the service keeps as each job finishes, made in one statement.
        inbox.rebuild_groups(session)
        for table in ("jobs", "job_configs", "runs"):
            session.execute(
                text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")
            )
    return {
        "jobs": len(job_rows) + (1 if results else 0),
        "configs": len(config_rows),
        "runs": len(run_rows),
        "findings": len(finding_rows),
        "test_results": results,
    }


def _suite_job(session: Session, project, job_id: int, config_id: int, created: dt.datetime) -> int:
    """The newest job: a pushed suite of SUITE_TESTS tests, surveyed then focused; returns
    its test results. Its job page is the benchmark's page of a suite of real size."""
    session.execute(
        insert(Job),
        [
            {
                "id": job_id,
                "project_id": project.id,
                "status": "done",
                "source": "github",
                "trigger": "push",
                "command": ["python3", "-m", "pytest", "tests"],
                "executor": "docker",
                "repeat": REPEAT,
                "notes": [],
                "created_at": created,
                "started_at": created,
                "finished_at": created + dt.timedelta(minutes=12),
            }
        ],
    )
    session.execute(
        insert(JobSource),
        [{"job_id": job_id, "kind": "git", "ref": "main", "branch": "main", "commit_sha": "c0ffee" * 6 + "abcd"}],
    )
    labels = ("cpuset=0", "cpuset=0-1")
    session.execute(
        insert(JobConfig),
        [
            {"id": config_id + p, "job_id": job_id, "position": p, "label": label, "cpuset": label.split("=")[1]}
            for p, label in enumerate(labels)
        ],
    )
    runs = []
    for p in range(len(labels)):
        runs.append({"config_id": config_id + p, "kind": "survey", "repetition": 1, "wall_s": 300.0 + p})
        runs += [
            {"config_id": config_id + p, "kind": "focus", "repetition": r + 1, "wall_s": 4.0 + p} for r in range(REPEAT)
        ]
    for run in runs:
        run.update(
            user_s=run["wall_s"] * 0.8,
            sys_s=0.5,
            max_rss_kb=90000,
            voluntary_ctx_switches=5000,
            involuntary_ctx_switches=100,
            exit_code=0,
            timed_out=False,
            foreign_cpus=0.0,
            started_at=created,
        )
    session.execute(insert(Run), runs)
    name = "'tests/suite/test_' || lpad(g::text, 4, '0') || '.py::test_case'"
    # Durations of a real suite: most tests take milliseconds, a few take seconds; the
    # flagged ones (the first FLAGGED) are 3x slower on one CPU.
    duration = "0.002 + 0.06 * power(random(), 6) + CASE WHEN g < :flagged AND c.position = 0 THEN 0.2 ELSE 0 END"
    added = session.execute(
        text(
            f"INSERT INTO test_results (run_id, test_id, duration_s, outcome, line) "
            f"SELECT r.id, {name}, {duration}, 'passed', 5 FROM runs r JOIN job_configs c ON c.id = r.config_id "
            "CROSS JOIN generate_series(0, :tests - 1) g "
            "WHERE c.job_id = :job AND (r.kind = 'survey' OR g < :focused)"
        ),
        {"job": job_id, "tests": SUITE_TESTS, "focused": FOCUSED, "flagged": FLAGGED},
    ).rowcount
    session.execute(
        insert(Finding),
        [
            {
                "job_id": job_id,
                "kind": "cpu_sensitivity",
                "severity": "high",
                "title": f"tests/suite/test_{g:04d}.py::test_case 3.0x slower with cpuset=0 than with cpuset=0-1",
                "detail": "seeded",
                "config_label": "cpuset=0",
                "test_id": f"tests/suite/test_{g:04d}.py::test_case",
                "metrics": {"ratio": 3.0},
                "evidence_ids": [],
                "fingerprint": fingerprint(project.name, "cpu_sensitivity", f"tests/suite/test_{g:04d}.py::test_case"),
                "status": "new",
                "regression": False,
                "created_at": created,
            }
            for g in range(FLAGGED)
        ],
    )
    return added


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
