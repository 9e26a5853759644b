"""Every invalid request gets a 4xx JSON answer that names the problem, never a 500."""

from __future__ import annotations

import io
import json

import pytest

from services.models import Job, JobSource

VALID = {"repository": {"url": "https://example.com/repo.git"}, "command": ["python3", "x.py"]}

INVALID_JOBS = [
    # (body, status, text the message must contain)
    ({}, 422, "command"),
    ({"repository": {"url": "https://example.com/r.git"}}, 422, "command"),
    ({**VALID, "command": []}, 422, "command"),
    ({**VALID, "command": ""}, 422, "command"),
    ({**VALID, "command": [""]}, 422, "command"),
    ({**VALID, "command": "python3 'unbalanced"}, 422, "command"),
    ({**VALID, "command": [1, 2]}, 422, "command.0"),
    ({**VALID, "command": {"a": 1}}, 422, "command"),
    ({**VALID, "repeat": 0}, 422, "repeat"),
    ({**VALID, "repeat": -3}, 422, "repeat"),
    ({**VALID, "repeat": 1000}, 422, "repeat"),
    ({**VALID, "repeat": "five"}, 422, "repeat"),
    ({**VALID, "repeat": 2.5}, 422, "repeat"),
    ({**VALID, "timeout_s": 0}, 422, "timeout_s"),
    ({**VALID, "timeout_s": -1}, 422, "timeout_s"),
    ({**VALID, "timeout_s": "soon"}, 422, "timeout_s"),
    ({**VALID, "configs": "cpuset=0"}, 422, "configs"),
    ({**VALID, "configs": ["cpuset=abc"]}, 422, "configs"),
    ({**VALID, "configs": ["bogus=1"]}, 422, "unknown key"),
    ({**VALID, "configs": ["cpus=-1"]}, 422, "configs"),
    ({**VALID, "configs": ["cpuset=0-99999999"]}, 422, "configs"),
    ({**VALID, "configs": ["cpuset=0", "cpuset=0"]}, 422, "more than once"),
    ({**VALID, "configs": [""]}, 422, "configs.0"),
    ({**VALID, "configs": [None]}, 422, "configs.0"),
    ({**VALID, "evidence": ["xray"]}, 422, "unknown probe 'xray'"),
    ({**VALID, "evidence": "strace"}, 422, "evidence"),
    ({**VALID, "stall_after_s": 0}, 422, "stall_after_s"),
    ({**VALID, "budget_s": 0}, 422, "budget_s"),
    ({**VALID, "budget_s": -60}, 422, "budget_s"),
    ({**VALID, "budget_s": "an hour"}, 422, "budget_s"),
    ({**VALID, "budget_s": 10**9}, 422, "budget_s"),
    ({**VALID, "kind": "nightly"}, 422, "kind"),
    ({**VALID, "kind": None}, 422, "kind"),
    ({**VALID, "executor": "kubernetes"}, 422, "unknown executor"),
    ({**VALID, "image": "debian:12", "executor": "local"}, 422, "image"),
    ({**VALID, "image": ""}, 422, "image"),
    ({**VALID, "colour": "blue"}, 422, "colour"),
    ({**VALID, "repository": {"url": ""}}, 422, "repository.url"),
    ({**VALID, "repository": {"url": "https://e/r.git", "branch": "x"}}, 422, "repository.branch"),
    ({**VALID, "repository": {"ref": "main"}}, 422, "repository.url"),
    ({**VALID, "repository": "https://e/r.git"}, 422, "repository"),
    ({**VALID, "repository": None}, 422, "repository"),
    ({**VALID, "repository": {"url": "ftp://e/r.git"}}, 422, "repository.url"),
    ({**VALID, "repository": {"url": "https://e/r.git", "ref": "--upload-pack=evil"}}, 422, "repository.ref"),
    ({**VALID, "repository": {"url": "https://e/r.git", "ref": "a..b"}}, 422, "repository.ref"),
    ([], 422, "(body)"),
    ("a string", 422, "(body)"),
    (42, 422, "(body)"),
]


@pytest.mark.parametrize("body,status,needle", INVALID_JOBS, ids=[str(i) for i in range(len(INVALID_JOBS))])
def test_invalid_job_bodies_are_4xx_naming_the_field(sqlite_api, body, status, needle):
    response = sqlite_api.post("/api/v1/jobs", json=body)
    assert response.status_code == status, response.get_json()
    error = response.get_json()
    assert needle in error["error"], error
    # The validator's own words, without pydantic's "Value error, " in front.
    for text in [error["error"], *(problem["message"] for problem in error["problems"])]:
        assert "Value error" not in text and "Assertion failed" not in text, error
    assert sqlite_api.count(Job) == 0 and sqlite_api.count(JobSource) == 0


def test_a_configs_problem_reads_as_its_validator_wrote_it(sqlite_api):
    response = sqlite_api.post("/api/v1/jobs", json={**VALID, "configs": ["cpus=abc"]})
    assert response.status_code == 422
    assert response.get_json()["problems"] == [{"field": "configs", "message": "cpus=abc: cpus='abc' is not a number"}]


@pytest.mark.parametrize(
    "data,content_type,status",
    [
        (b"{not json", "application/json", 400),
        (b"", "application/json", 400),
        (b"null", "application/json", 422),
        (b"\xff\xfe", "application/json", 400),
        (json.dumps(VALID).encode(), "text/plain", 415),
        (json.dumps(VALID).encode(), "application/x-www-form-urlencoded", 415),
    ],
)
def test_malformed_bodies_are_4xx(sqlite_api, data, content_type, status):
    response = sqlite_api.post("/api/v1/jobs", data=data, content_type=content_type)
    assert response.status_code == status
    assert response.get_json()["error"]


@pytest.mark.parametrize("body, kind", [({}, "matrix"), ({"kind": "gate"}, "gate"), ({"kind": "matrix"}, "matrix")])
def test_a_job_is_a_matrix_unless_it_asks_for_a_gate(sqlite_api, body, kind):
    response = sqlite_api.post("/api/v1/jobs", json={**VALID, **body})
    assert response.status_code == 201, response.get_json()
    assert response.get_json()["kind"] == kind
    assert sqlite_api.get(f"/api/v1/jobs/{response.get_json()['id']}").get_json()["kind"] == kind


def test_file_repositories_are_refused_unless_allowed(sqlite_api):
    sqlite_api.settings.allow_file_repositories = False
    response = sqlite_api.post("/api/v1/jobs", json={**VALID, "repository": {"url": "file:///etc"}})
    assert response.status_code == 422
    assert "LAGTRACE_ALLOW_FILE_REPOSITORIES" in response.get_json()["error"]


@pytest.mark.parametrize(
    "form,status,needle",
    [
        ({"job": json.dumps({"command": ["x"]})}, 422, "archive"),
        ({"job": "{oops", "archive": (io.BytesIO(b"x"), "a.tgz")}, 400, "job"),
        ({"job": json.dumps({"command": []}), "archive": (io.BytesIO(b"x"), "a.tgz")}, 422, "command"),
        ({"job": json.dumps({"command": ["x"]}), "archive": (io.BytesIO(b"not a tarball"), "a.tgz")}, 422, "archive"),
        ({"job": json.dumps({**VALID}), "archive": (io.BytesIO(b"x"), "a.tgz")}, 422, "repository"),
    ],
)
def test_invalid_uploads_are_4xx(sqlite_api, form, status, needle):
    response = sqlite_api.post("/api/v1/jobs", data=form, content_type="multipart/form-data")
    assert response.status_code == status, response.get_json()
    assert needle in response.get_json()["error"]
    assert sqlite_api.count(Job) == 0


def test_an_archive_over_the_cap_is_413(sqlite_api):
    limit = sqlite_api.client.application.config["MAX_CONTENT_LENGTH"]
    response = sqlite_api.post(
        "/api/v1/jobs",
        data={"job": "{}", "archive": (io.BytesIO(b"0" * (limit + 1)), "a")},
        content_type="multipart/form-data",
    )
    assert response.status_code == 413
    # The limit and the setting that raises it, not werkzeug's "exceeds the capacity limit".
    assert response.get_json()["error"] == (
        "the upload is over the 50 MiB limit (LAGTRACE_MAX_ARCHIVE_BYTES, 52,428,800 bytes, for the archive; "
        "the form around it may add 1 MiB): nothing was stored"
    )
    assert response.get_json()["problems"][0]["field"] == "(body)"


@pytest.mark.parametrize(
    "path,body,needle",
    [
        ("/api/v1/jobs/1/rerun", {}, "configs"),
        ("/api/v1/jobs/1/rerun", {"configs": []}, "configs"),
        ("/api/v1/jobs/1/rerun", {"configs": ["cpuset=0"], "repeat": 0}, "repeat"),
        ("/api/v1/jobs/1/rerun", {"configs": ["cpuset=0"], "extra": 1}, "extra"),
    ],
)
def test_invalid_rerun_bodies(sqlite_api, path, body, needle):
    response = sqlite_api.post(path, json=body)
    assert response.status_code == 422
    assert needle in response.get_json()["error"]


@pytest.mark.parametrize(
    "body,needle",
    [
        ({}, "at least one"),
        ({"status": "solved"}, "status"),
        ({"status": None}, "status"),
        ({"assignee": 5}, "assignee"),
        ({"note": "x" * 10001}, "note"),
        ({"severity": "low"}, "severity"),
    ],
)
def test_invalid_triage_bodies(sqlite_api, body, needle):
    response = sqlite_api.client.patch("/api/v1/findings/1", json=body, headers=sqlite_api.auth)
    assert response.status_code == 422
    assert needle in response.get_json()["error"]


@pytest.mark.parametrize(
    "query,needle",
    [
        ("status=sleeping", "query.status"),
        ("limit=0", "query.limit"),
        ("limit=many", "query.limit"),
        ("before_id=-1", "query.before_id"),
        ("colour=red", "query.colour"),
    ],
)
def test_invalid_job_queries(sqlite_api, query, needle):
    response = sqlite_api.get(f"/api/v1/jobs?{query}")
    assert response.status_code == 422
    assert needle in response.get_json()["error"]


@pytest.mark.parametrize(
    "query,needle", [("severity=huge", "query.severity"), ("job_id=x", "query.job_id"), ("status=open", "query.status")]
)
def test_invalid_finding_queries(sqlite_api, query, needle):
    response = sqlite_api.get(f"/api/v1/findings?{query}")
    assert response.status_code == 422
    assert needle in response.get_json()["error"]


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic dXNlcg=="}, {"Authorization": "Bearer "}]
)
def test_no_valid_token_is_401(sqlite_api, headers):
    response = sqlite_api.client.post("/api/v1/jobs", json=VALID, headers=headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert sqlite_api.count(Job) == 0


@pytest.mark.parametrize(
    "method,path,status",
    [
        ("get", "/api/v1/jobs/999", 404),
        ("get", "/api/v1/nothing", 404),
        ("delete", "/api/v1/jobs", 405),
        ("get", "/api/v1/findings/999", 404),
        ("post", "/api/v1/jobs/999/cancel", 404),
    ],
)
def test_unknown_routes_and_ids_are_json(sqlite_api, method, path, status):
    response = getattr(sqlite_api.client, method)(path, headers=sqlite_api.auth)
    assert response.status_code == status
    assert response.get_json()["error"]
