"""Every endpoint of the API, sent bad input: each 4xx answer names the field to change
(`problems[].field`), as docs/reference/api.md promises. A new endpoint without bad-input cases here
fails the coverage test, so it cannot ship without being walked."""

from __future__ import annotations

import io
import json

import pytest
from werkzeug.exceptions import HTTPException

from tests.api.test_validation import INVALID_JOBS, VALID

REPOSITORY = {"url": "https://example.com/repo.git"}
NO_AUTH = {"Authorization": ""}
BAD_TOKEN = {"Authorization": "Bearer lt_not-a-token"}
BISECT = {"project": "demo", "test": "test_x.py::test_y", "config": "cpuset=0", "good": "v1", "bad": "main"}


def upload(job: dict | str, archive: bytes | None = b"x") -> dict:
    form: dict = {"job": job if isinstance(job, str) else json.dumps(job)}
    if archive is not None:
        form["archive"] = (io.BytesIO(archive), "code.tar.gz")
    return {"data": form, "content_type": "multipart/form-data"}


# (method, path, request keyword arguments, expected status, a field the answer must name)
CASES: list[tuple[str, str, dict, int, str]] = [
    ("POST", "/api/v1/jobs", {"json": VALID, "headers": NO_AUTH}, 401, "header.Authorization"),
    ("POST", "/api/v1/jobs", {"json": VALID, "headers": BAD_TOKEN}, 401, "header.Authorization"),
    ("POST", "/api/v1/jobs", {"data": b"{not json", "content_type": "application/json"}, 400, "(body)"),
    ("POST", "/api/v1/jobs", {"data": json.dumps(VALID), "content_type": "text/plain"}, 415, "header.Content-Type"),
    ("POST", "/api/v1/jobs", {"json": {"command": ["x"]}}, 422, "repository"),
    ("POST", "/api/v1/jobs", {"json": {**VALID, "repeat": 31}}, 422, "repeat"),
    ("POST", "/api/v1/jobs", {"json": {**VALID, "timeout_s": 5000}}, 422, "timeout_s"),
    ("POST", "/api/v1/jobs", {"json": {**VALID, "executor": "local"}}, 422, "executor"),
    ("POST", "/api/v1/jobs", {"json": {**VALID, "image": "lagtrace-deps:abc"}}, 422, "image"),
    ("POST", "/api/v1/jobs", {"json": {**VALID, "image": "evil:1"}}, 422, "image"),
    ("POST", "/api/v1/jobs", {"json": {**VALID, "stall_after_s": 100000}}, 422, "stall_after_s"),
    ("POST", "/api/v1/jobs", {"json": {**VALID, "repository": {"url": "ftp://e/r.git"}}}, 422, "repository.url"),
    ("POST", "/api/v1/jobs", {"json": {**VALID, "repository": {**REPOSITORY, "ref": "a..b"}}}, 422, "repository.ref"),
    ("POST", "/api/v1/jobs", upload({"command": ["x"]}, None), 422, "archive"),
    ("POST", "/api/v1/jobs", upload("{oops"), 400, "job"),
    ("POST", "/api/v1/jobs", upload({"command": []}), 422, "command"),
    ("POST", "/api/v1/jobs", upload({"command": ["x"]}, b"not a tarball"), 422, "archive"),
    ("POST", "/api/v1/jobs", upload(VALID), 422, "repository"),
    *[("POST", "/api/v1/jobs", {"json": body}, status, "") for body, status, _ in INVALID_JOBS],
    ("DELETE", "/api/v1/jobs", {}, 405, "method"),
    ("GET", "/api/v1/jobs", {"query_string": {"status": "bogus"}}, 422, "query.status"),
    ("GET", "/api/v1/jobs", {"query_string": {"limit": "0"}}, 422, "query.limit"),
    ("GET", "/api/v1/jobs", {"query_string": {"colour": "blue"}}, 422, "query.colour"),
    ("GET", "/api/v1/jobs", {"headers": NO_AUTH}, 401, "header.Authorization"),
    ("GET", "/api/v1/workers", {"headers": NO_AUTH}, 401, "header.Authorization"),
    ("GET", "/api/v1/jobs/999999", {}, 404, "path.job_id"),
    ("POST", "/api/v1/jobs/999999/cancel", {}, 404, "path.job_id"),
    ("POST", "/api/v1/jobs/{job}/cancel", {}, 409, "path.job_id"),  # cancelled already, by the fixture
    ("POST", "/api/v1/jobs/{job}/rerun", {"json": {}}, 422, "configs"),
    ("POST", "/api/v1/jobs/{job}/rerun", {"json": {"configs": ["bogus=1"]}}, 422, "configs"),
    ("POST", "/api/v1/jobs/{job}/rerun", {"json": {"configs": ["cpuset=0"], "repeat": 0}}, 422, "repeat"),
    ("POST", "/api/v1/jobs/{job}/rerun", {"json": {"configs": ["cpuset=0"], "test": "x"}}, 422, "test"),
    ("POST", "/api/v1/jobs/{job}/rerun", {"data": "x", "content_type": "text/plain"}, 415, "header.Content-Type"),
    ("POST", "/api/v1/jobs/999999/rerun", {"json": {"configs": ["cpuset=0"]}}, 404, "path.job_id"),
    ("POST", "/api/v1/bisects", {"json": BISECT, "headers": NO_AUTH}, 401, "header.Authorization"),
    ("POST", "/api/v1/bisects", {"data": b"{not json", "content_type": "application/json"}, 400, "(body)"),
    ("POST", "/api/v1/bisects", {"data": json.dumps(BISECT), "content_type": "text/plain"}, 415, "header.Content-Type"),
    ("POST", "/api/v1/bisects", {"json": BISECT}, 422, "project"),  # demo has no registered repository
    ("POST", "/api/v1/bisects", {"json": {**BISECT, "project": "other"}}, 422, "project"),
    ("POST", "/api/v1/bisects", {"json": {**BISECT, "test": ""}}, 422, "test"),
    ("POST", "/api/v1/bisects", {"json": {**BISECT, "command": ["make", "check"]}}, 422, "command"),
    ("POST", "/api/v1/bisects", {"json": {**BISECT, "config": "cpuset=x"}}, 422, "config"),
    ("POST", "/api/v1/bisects", {"json": {**BISECT, "good": "a..b"}}, 422, "good"),
    ("GET", "/api/v1/findings", {"query_string": {"severity": "huge"}}, 422, "query.severity"),
    ("GET", "/api/v1/findings", {"query_string": {"job_id": "0"}}, 422, "query.job_id"),
    ("GET", "/api/v1/findings", {"query_string": {"status": "gone"}}, 422, "query.status"),
    ("GET", "/api/v1/findings/999999", {}, 404, "path.finding_id"),
    ("POST", "/api/v1/findings/999999/confirm", {}, 404, "path.finding_id"),
    ("PATCH", "/api/v1/findings/999999", {"json": {}}, 422, "(body)"),
    ("PATCH", "/api/v1/findings/999999", {"json": {"status": None}}, 422, "status"),
    ("PATCH", "/api/v1/findings/999999", {"json": {"status": "solved"}}, 422, "status"),
    ("PATCH", "/api/v1/findings/999999", {"json": {"note": "x" * 10001}}, 422, "note"),
    ("PATCH", "/api/v1/findings/999999", {"json": {"status": "muted"}}, 404, "path.finding_id"),
    ("PATCH", "/api/v1/findings/1", {"data": "x", "content_type": "text/plain"}, 415, "header.Content-Type"),
    ("GET", "/api/v1/artifacts/job-1/run-1/nothing.svg", {}, 404, "path.key"),
    ("GET", "/api/v1/no-such-thing", {}, 404, "path"),
    ("POST", "/api/v1/webhooks/github", {"json": {}, "headers": {"X-GitHub-Event": "push"}}, 401, ""),
]
# No input to get wrong: the service's own description.
NO_INPUT = {"openapi.openapi"}


@pytest.fixture
def walked(sqlite_api):
    created = sqlite_api.post("/api/v1/jobs", json=VALID)
    assert created.status_code == 201, created.get_json()
    job = created.get_json()["id"]
    assert sqlite_api.post(f"/api/v1/jobs/{job}/cancel").status_code == 200
    return sqlite_api, job


@pytest.mark.parametrize(
    "method,path,kwargs,status,field", CASES, ids=[f"{c[0]} {c[1]} {i}" for i, c in enumerate(CASES)]
)
def test_every_4xx_names_the_field(walked, method, path, kwargs, status, field):
    api, job = walked
    kwargs = dict(kwargs)
    headers = {**api.auth, **kwargs.pop("headers", {})}
    headers = {name: value for name, value in headers.items() if value}
    response = api.client.open(path.format(job=job), method=method, headers=headers, **kwargs)
    body = response.get_json()
    assert response.status_code == status, body
    assert body["error"] and body["problems"], body
    for problem in body["problems"]:
        assert problem["field"] and problem["message"], body
    if field:
        assert field in [problem["field"] for problem in body["problems"]], body


def test_every_endpoint_is_walked(sqlite_api):
    app = sqlite_api.client.application
    endpoints = {rule.endpoint for rule in app.url_map.iter_rules() if rule.rule.startswith("/api/v1/")}
    adapter = app.url_map.bind("localhost")
    walked = set()
    for method, path, *_ in CASES:
        try:
            walked.add(adapter.match(path.format(job=1), method=method)[0])
        except HTTPException:
            continue  # a route that does not exist (or a method it has not) walks no endpoint
    assert endpoints - NO_INPUT <= walked, sorted(endpoints - NO_INPUT - walked)
