"""A worker killed (kill -9) in the middle of a bisect: the step is taken again once its
lease is over, the search starts over, and the runs the dead attempt stored are deleted
first, so the result counts each run once (services/jobs/bisect_step.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from sqlalchemy import func, select

from services import steps
from services.db import make_engine, make_session_factory
from services.jobs import outbox, sources
from services.jobs.bisect_jobs import BisectSpec, submit_bisect
from services.models import Bisect, Job, JobConfig, JobStatus, JobTask, Project, Run
from services.settings import Settings
from tests.conftest import PYTHON, REPO
from tests.service_support import register
from tests.support.bisect_history import TARGET, make_history

# The killed attempt's process: the step as a worker's pool child runs it.
CHILD = """
import json, sys
from services import steps
from services.db import make_engine, make_session_factory
from services.jobs.dispatch import Step
from services.settings import Settings

options = json.loads(sys.argv[1])
settings = Settings(**options["settings"])
steps.run_step(make_session_factory(make_engine(settings)), settings, Step("bisect", options["job"], "bisect"))
"""


@pytest.mark.latency
def test_a_bisect_retaken_after_its_worker_died_counts_each_run_once(tmp_path, migrated_sqlite):
    path = tmp_path / "lagtrace.db"
    shutil.copy(migrated_sqlite, path)
    options = {
        "database_url": f"sqlite:///{path}",
        "work_dir": str(tmp_path / "work"),
        "allow_file_repositories": True,
        "allowed_executors": ["local"],
        # A dead worker's lease is over within seconds, not the default minute.
        "step_lease_s": 4.0,
        "heartbeat_interval_s": 1.0,
    }
    settings = Settings(**options)
    engine = make_engine(settings)
    factory = make_session_factory(engine)
    try:
        shas = make_history(tmp_path / "repo", 16, 9)
        register(settings, factory, f"file://{tmp_path / 'repo'}", "octo/demo")
        with factory() as session:
            project = session.scalar(select(Project).where(Project.name == "octo/demo"))
            spec = BisectSpec(
                project="octo/demo",
                test=TARGET,
                config="cpuset=0",
                good=shas[0],
                bad=shas[-1],
                command=[PYTHON, "-m", "pytest", "-q", "test_work.py"],
                executor="local",
            )
            job = submit_bisect(session, settings, project, spec, origin="api")
            [step] = outbox.pending(session)
            session.commit()
            job_id = job.id

        def runs() -> int:
            with factory() as session:
                return session.scalar(
                    select(func.count()).select_from(Run).join(JobConfig).where(JobConfig.job_id == job_id)
                )

        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, json.dumps({"settings": options, "job": job_id})],
            cwd=REPO,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 120
            while runs() < 7 and time.monotonic() < deadline and child.poll() is None:
                time.sleep(0.1)
            assert runs() >= 7, "the first attempt stored no runs"
        finally:
            os.killpg(child.pid, signal.SIGKILL)  # the worker and the pytest it runs
            child.wait()
        killed_with = runs()

        # The reconciler's resend, once the dead worker's lease is over (its last heartbeat
        # renewed it for step_lease_s): the same step again, as another worker takes it.
        with factory() as session:
            assert session.scalar(select(JobTask.attempts).where(JobTask.job_id == job_id)) == 1
        time.sleep(settings.step_lease_s + 1)
        steps.run_step(factory, settings, step)

        with factory() as session:
            job = session.get(Job, job_id)
            assert job.status is JobStatus.done, job.error
            assert session.scalar(select(JobTask.attempts).where(JobTask.job_id == job_id)) == 2
            result = session.get(Bisect, job_id).result
            stored = session.scalars(select(Run).join(JobConfig).where(JobConfig.job_id == job_id).order_by(Run.id))
            stored_commits = [run.commit_sha for run in stored]
        assert result["verdict"] == "culprit" and result["culprit"] == shas[9], result["reason"]
        # The dead attempt's runs are gone: what is stored is the retaken search's, each once.
        assert stored_commits == [run["commit"] for run in result["runs"]]
        assert len(stored_commits) == result["cost"]["runs"] == 30, (killed_with, len(stored_commits))
        # The dead attempt's checkouts (its clone, its worktrees) are the sweep's to remove.
        assert sources.sweep_checkouts(settings)
        assert [p.name for p in (settings.work_dir / "jobs").iterdir()] == []
    finally:
        engine.dispose()
