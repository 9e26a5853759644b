"""A real `lagtrace run` says what it will cost after the suite's first run, stores the
prediction on the job, and the finished job's page and detail show it beside the time the
job took (services/jobs/forecast.py, docs/explanations/cost-model.md)."""

from __future__ import annotations

import re
import sys

import pytest
from sqlalchemy import select

from services.jobs import submit
from services.models import Job
from tests.conftest import EXAMPLES, run_cli
from tests.web.conftest import build_dashboard


@pytest.mark.latency
def test_a_job_predicts_its_cost_after_its_first_run(sqlite_url, tmp_path):
    suite = EXAMPLES / "pytest_suite"
    result = run_cli(
        [
            "run",
            "--executor",
            "local",
            "--config",
            "cpuset=0",
            "--config",
            "cpuset=0-1",
            "--repeat",
            "5",
            # A plan the forecast knows whole: the screen's rounds, no drill.
            "--evidence",
            "none",
            "--workdir",
            str(suite),
            "--",
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "test_latency.py",
        ],
        sqlite_url,
    )
    assert result.returncode == 0, result.stderr
    said = re.findall(
        r"forecast after the suite's first run: predicted about (\d+) s .*, about (\d+) s left", result.stderr
    )
    assert len(said) == 1, result.stderr  # said once, before the screen's timing runs
    assert result.stderr.index("forecast after") < result.stderr.index("run 1/5")

    dashboard = build_dashboard(sqlite_url, tmp_path / "web", run_jobs=False, migrated=True)
    try:
        with dashboard.session_factory() as session:
            job = session.scalars(select(Job)).one()
            detail = submit.job_detail(session, job, page=True)
            project = job.project.name
        dashboard.add_user("ada", [project])
        dashboard.sign_in("ada")
        html = dashboard.page(f"/jobs/{job.id}")
    finally:
        dashboard.engine.dispose()
    first, actual = job.first_predicted_s, detail["forecast"]["actual_s"]
    assert first is not None and job.predicted_s is not None and job.predicted_at is not None
    assert detail["predicted_s"] == job.predicted_s and actual is not None
    print(f"predicted {first:.1f} s after the first run, took {actual:.1f} s: {actual / first:.2f}x")
    # The plan is known whole (no drill): the prediction holds within a factor of 3.
    assert first / 3 <= actual <= first * 3
    assert re.search(r"Forecast: predicted about \d+ s after the suite's first run; the job took [\d.]+ s", html), html
