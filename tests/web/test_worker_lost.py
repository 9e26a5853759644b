"""The job page says when a step's worker was lost, or when no worker is running."""

from __future__ import annotations

import datetime as dt

from services.jobs import workers
from services.jobs.dispatch import SCREEN
from services.models import Job, JobStatus, JobTask, TaskState, utcnow
from tests.web.sample_data import store_handoff_job


def _running_job(dashboard, *, last_beat_s: float) -> int:
    dashboard.add_user("ann", ["demo"])
    with dashboard.session_factory() as session:
        job = store_handoff_job(session, dashboard.settings, created_at=dt.datetime(2026, 11, 1, tzinfo=dt.UTC))
        session.get(Job, job.id).status = JobStatus.running
        lease = dashboard.settings.lease_s - last_beat_s
        session.add(
            JobTask(
                job_id=job.id,
                step=SCREEN,
                name=SCREEN,
                state=TaskState.running,
                attempts=1,
                worker="vm/6307",
                lease_expires_at=utcnow() + dt.timedelta(seconds=lease),
            )
        )
        session.commit()
        job_id = job.id
    assert dashboard.sign_in("ann").status_code == 302
    return job_id


def test_a_screen_whose_worker_stopped_beating_shows_it_lost(dashboard):
    dashboard.settings.broker_url = "redis://127.0.0.1:1/0"
    job_id = _running_job(dashboard, last_beat_s=workers.lapse_s(dashboard.settings) + 3)
    html = dashboard.page(f"/jobs/{job_id}")
    warning = html[html.index('id="worker-warning"') :].split("</p>")[0]
    assert "hidden" not in warning
    assert "worker lost, waiting to be taken again (screen on vm/6307)" in warning
    assert "no worker is running: start one with <code>" not in warning  # text, not markup
    assert "no worker is running: start one with `lagtrace worker`" in warning  # nobody beats
    assert "<td>worker lost</td><td>vm/6307</td>" in html
    progress = dashboard.client.get(f"/jobs/{job_id}/progress").get_json()
    assert progress["warning"].startswith(workers.LOST)
    assert {c["state"] for c in progress["configs"]} == {"worker lost"}


def test_a_screen_beating_on_time_shows_no_warning(dashboard):
    dashboard.settings.broker_url = "redis://127.0.0.1:1/0"
    job_id = _running_job(dashboard, last_beat_s=1)
    with dashboard.session_factory() as session:
        workers.beat(session, workers.Identity("vm/6300", None, "0-1", None, 1))
        session.commit()
    html = dashboard.page(f"/jobs/{job_id}")
    warning = html[html.index('id="worker-warning"') :].split("</p>")[0]
    assert " hidden>" in warning and "worker lost" not in warning
    assert dashboard.client.get(f"/jobs/{job_id}/progress").get_json()["warning"] is None
