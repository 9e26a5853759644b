"""/healthz, /readyz, /metrics and the OpenAPI document."""

from __future__ import annotations

import re

import jsonschema
from openapi_spec_validator import validate
from pydantic import SecretStr
from sqlalchemy import create_engine

from api.openapi import OPENAPI_PATH
from services.jobs import workers
from tests.conftest import run_cli


def test_healthz_and_readyz(api):
    assert api.client.get("/healthz").get_json() == {"status": "ok"}
    ready = api.client.get("/readyz")
    assert ready.status_code == 200 and ready.get_json()["status"] == "ready"


def test_readyz_says_what_is_missing(sqlite_api):
    # The fixture's job thread was never started: nothing would run a job.
    response = sqlite_api.client.get("/readyz")
    assert response.status_code == 503
    assert response.get_json()["components"] == {"database": "ok", "queue": "failed", "disk": "ok"}


def test_readyz_of_a_server_that_runs_jobs_on_a_full_disk(sqlite_api):
    # `lagtrace serve` without a broker runs the jobs itself: a work directory under
    # LAGTRACE_MIN_FREE_DISK_BYTES takes no step, so the server is not ready.
    context = sqlite_api.client.application.extensions["lagtrace"]
    context.settings = context.settings.model_copy(update={"min_free_disk_bytes": 2**62})
    response = sqlite_api.client.get("/readyz")
    assert response.status_code == 503 and response.get_json()["components"]["disk"] == "failed"


def test_readyz_with_an_unreachable_database(sqlite_api):
    # Nothing listens on port 1: a database that went away.
    sqlite_api.client.application.extensions["lagtrace"].engine = create_engine(
        "postgresql+psycopg://nobody@127.0.0.1:1/none"
    )
    response = sqlite_api.client.get("/readyz")
    assert response.status_code == 503 and response.get_json()["components"]["database"] == "failed"


def test_readyz_with_no_worker_alive_is_ready_and_its_documented_answer_says_so(api):
    # The contract: 200 "ready" with no worker alive (jobs wait queued), the answer saying
    # it, as the OpenAPI document (and the API reference made from it) describes.
    api.settings.broker_url = "redis://127.0.0.1:1/0"  # jobs go to workers; none runs
    response = api.client.get("/readyz")
    answer = response.get_json()
    assert response.status_code == 200 and answer["status"] == "ready"
    assert answer["workers"] == {"live": 0} and answer["warning"] == workers.NO_WORKER
    doc = api.client.get(OPENAPI_PATH).get_json()
    readyz = doc["paths"]["/readyz"]["get"]["responses"]
    assert readyz["200"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Readiness"}
    schema = doc["components"]["schemas"]["Readiness"]
    assert {"workers", "warning"} <= set(schema["properties"])
    jsonschema.validate(answer, schema)
    assert "no worker is alive" in schema["properties"]["warning"]["description"]


def test_metrics_count_requests_and_jobs(sqlite_api):
    sqlite_api.post("/api/v1/jobs", json={"repository": {"url": "https://example.com/r.git"}, "command": ["x"]})
    sqlite_api.post("/api/v1/jobs", json={})
    sqlite_api.settings.metrics_token = SecretStr("scrape-token")
    text = sqlite_api.client.get("/metrics", headers={"Authorization": "Bearer scrape-token"}).get_data(as_text=True)
    assert 'lagtrace_jobs{status="queued"} 1.0' in text
    assert 'lagtrace_tasks{state="pending",step="prepare"} 1.0' in text
    assert 'lagtrace_http_requests_total{endpoint="/api/v1/jobs",method="POST",status="201"} 1.0' in text
    assert 'lagtrace_http_requests_total{endpoint="/api/v1/jobs",method="POST",status="422"} 1.0' in text
    assert 'lagtrace_jobs_submitted_total{source="api"} 1.0' in text


def test_the_openapi_document_is_valid_and_covers_every_route(sqlite_api):
    response = sqlite_api.client.get(OPENAPI_PATH)
    assert response.status_code == 200
    document = response.get_json()
    validate(document)
    documented = {(path, method) for path, item in document["paths"].items() for method in item}
    served = set()
    for rule in sqlite_api.client.application.url_map.iter_rules():
        if rule.endpoint.startswith("web."):
            continue  # the dashboard shares the app; the document covers the API
        path = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule)
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            served.add((path, method.lower()))
    assert served == documented
    # Request schemas are the validating models themselves.
    assert "repository" in document["components"]["schemas"]["JobCreate"]["properties"]
    assert document["components"]["schemas"]["Triage"]["properties"]["status"]


def test_one_repeat_limit_from_the_settings_in_the_api_its_document_the_forms_and_the_cli(sqlite_api, tmp_path):
    """The server took 30, the schema and the forms said 100: now LAGTRACE_MAX_REPEAT, everywhere."""
    sqlite_api.settings.max_repeat = 12
    schemas = sqlite_api.client.get(OPENAPI_PATH).get_json()["components"]["schemas"]
    assert schemas["JobCreate"]["properties"]["repeat"]["maximum"] == 12
    assert schemas["Rerun"]["properties"]["repeat"]["anyOf"][0]["maximum"] == 12
    body = {"repository": {"url": "https://example.com/r.git"}, "command": ["python3", "x.py"]}
    assert sqlite_api.post("/api/v1/jobs", json={**body, "repeat": 12}).status_code == 201
    refused = sqlite_api.post("/api/v1/jobs", json={**body, "repeat": 13, "configs": ["cpus=abc"]})
    assert refused.status_code == 422
    # Checked with the other fields: both problems in one answer.
    assert refused.get_json()["problems"] == [
        {"field": "configs", "message": "cpus=abc: cpus='abc' is not a number"},
        {"field": "repeat", "message": "at most 12 (LAGTRACE_MAX_REPEAT)"},
    ]
    # `lagtrace run` (no server between) keeps the same limit, from the same setting.
    done = run_cli(["run", "--repeat", "31", "--", "true"], f"sqlite:///{tmp_path / 'cli.db'}")
    assert done.returncode == 2 and "--repeat: at most 30 (LAGTRACE_MAX_REPEAT)" in done.stderr


def test_an_app_started_while_the_database_is_down_answers_503_not_500():
    """The dashboard's signing key is kept in the database (web/app.py): a process that
    starts during an outage cannot read it, and an API request must still get the
    outage's 503, not a bare 500 from Flask opening the session."""
    from cli.wsgi import create_app
    from services.jobs.dispatch import InProcessDispatcher
    from services.settings import Settings

    # Nothing listens on port 1: a database that is away when the process starts.
    settings = Settings(database_url="postgresql+psycopg://nobody@127.0.0.1:1/none")
    client = create_app(settings, InProcessDispatcher(lambda step: None)).test_client()
    assert client.get("/healthz").status_code == 200
    response = client.get("/api/v1/jobs/1", headers={"Authorization": "Bearer lt_not_checked_yet"})
    assert response.status_code == 503, response.get_data(as_text=True)
    assert "database is unavailable" in response.get_json()["error"]
    # The dashboard's pages too: the sign-in form needs a session for its CSRF token.
    for path in ("/sign-in", "/"):
        page = client.get(path)
        assert page.status_code == 503, (path, page.status_code, page.get_data(as_text=True)[:300])
        assert "database is unavailable" in page.get_data(as_text=True)
        assert page.headers.get("Retry-After") == "30"
