"""/api/v1/workers and the live workers /readyz counts: from the workers' own rows."""

from __future__ import annotations

import datetime as dt

from services.jobs import workers
from services.models import Worker, utcnow


def add_worker(api, name: str, silent_s: float = 0.0) -> None:
    with api.session_factory() as session:
        workers.beat(session, workers.Identity(name=name, node="n1", cpus="0-1", cpu_model=None, concurrency=1))
        session.commit()
        if silent_s:
            row = session.query(Worker).filter_by(name=name).one()
            row.heartbeat_at = utcnow() - dt.timedelta(seconds=silent_s)
            session.commit()


def test_readyz_counts_live_workers_and_stays_ready_without_any(api):
    # Without a broker the server runs jobs itself: no worker to count.
    assert "workers" not in api.client.get("/readyz").get_json()
    api.settings.broker_url = "redis://127.0.0.1:1/0"  # jobs now go to workers (none runs)
    ready = api.client.get("/readyz")
    answer = ready.get_json()
    # Not a reason to take the API away (the chart's readiness probe reads this).
    assert ready.status_code == 200 and answer["status"] == "ready"
    assert answer["workers"] == {"live": 0} and answer["warning"] == workers.NO_WORKER
    add_worker(api, "host/7")
    add_worker(api, "host/8", silent_s=workers.lapse_s(api.settings) + 5)  # killed
    answer = api.client.get("/readyz").get_json()
    assert answer["workers"] == {"live": 1} and "warning" not in answer
    # Names and hosts are for token holders only.
    assert "host/7" not in api.client.get("/readyz").get_data(as_text=True)


def test_the_workers_view_lists_each_with_its_last_heartbeat(api):
    assert api.client.get("/api/v1/workers").status_code == 401
    api.settings.broker_url = "redis://127.0.0.1:1/0"
    add_worker(api, "host/7")
    add_worker(api, "host/8", silent_s=600)
    listed = api.get("/api/v1/workers").get_json()
    assert listed["live"] == 1 and listed["expected"] is True
    by_name = {w["name"]: w for w in listed["workers"]}
    assert by_name["host/7"]["alive"] is True and by_name["host/7"]["cpus"] == "0-1"
    assert by_name["host/8"]["alive"] is False and by_name["host/8"]["heartbeat_age_s"] >= 600
    assert listed["heartbeat_lapse_s"] == workers.lapse_s(api.settings)


def test_a_queued_job_in_the_api_says_no_worker_is_running(sqlite_api):
    sqlite_api.settings.broker_url = "redis://127.0.0.1:1/0"
    created = sqlite_api.post(
        "/api/v1/jobs", json={"repository": {"url": "https://example.com/r.git"}, "command": ["x"]}
    ).get_json()
    assert created["progress"]["warning"] == workers.NO_WORKER
    add_worker(sqlite_api, "host/9")
    job = sqlite_api.get(f"/api/v1/jobs/{created['id']}").get_json()
    assert job["status"] == "queued" and job["progress"]["warning"] is None
