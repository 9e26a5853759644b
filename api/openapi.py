"""The OpenAPI 3.1 document, served at /api/v1/openapi.json.

Request schemas come from the same pydantic models that validate the bodies, so the
document cannot drift from what the server accepts; tests check every route is in it.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify
from pydantic import BaseModel

from api.schemas import BisectCreate, FindingListQuery, JobCreate, JobListQuery, Rerun, Triage
from services.context import ctx
from services.settings import Settings

bp = Blueprint("openapi", __name__, url_prefix="/api/v1")

OPENAPI_PATH = "/api/v1/openapi.json"
BODY_MODELS = (JobCreate, Rerun, BisectCreate, Triage)
ERRORS = {
    "400": "Malformed body (not JSON)",
    "401": "Missing or unknown token",
    "404": "Not found in this project",
    "409": "Not allowed in the current state",
    "403": "Not enabled on this server",
    "413": "Body too large",
    "415": "Wrong content type",
    "422": "Invalid field; `problems` names each one",
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _responses(ok: str, description: str, schema: str, errors: tuple[str, ...]) -> dict[str, Any]:
    responses = {ok: {"description": description, **_json(_ref(schema))}}
    for code in errors:
        responses[code] = {"description": ERRORS[code], **_json(_ref("Error"))}
    return responses


def _query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})

    def inlined(node: Any) -> Any:
        # A parameter's schema stands alone in OpenAPI: enums (Severity...) are written in place.
        if isinstance(node, dict):
            if "$ref" in node:
                return inlined(definitions[node["$ref"].rsplit("/", 1)[1]])
            return {key: inlined(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inlined(item) for item in node]
        return node

    return [
        {"name": name, "in": "query", "required": False, "schema": inlined(prop)}
        for name, prop in schema["properties"].items()
    ]


def _path_id(name: str) -> list[dict[str, Any]]:
    return [{"name": name, "in": "path", "required": True, "schema": {"type": "integer", "minimum": 1}}]


def _operation(
    summary: str, responses: dict, *, body: str | None = None, params: list | None = None, secure: bool = True
) -> dict[str, Any]:
    operation: dict[str, Any] = {"summary": summary, "responses": responses}
    if body:
        operation["requestBody"] = {"required": True, **_json(_ref(body))}
    if params:
        operation["parameters"] = params
    operation["security"] = [{"bearer": []}] if secure else []
    return operation


def document(settings: Settings | None = None) -> dict[str, Any]:
    """The document a server with ``settings`` serves (None: the settings' defaults, as the
    docs' API reference shows it)."""
    max_repeat = settings.max_repeat if settings is not None else Settings.model_fields["max_repeat"].default
    schemas: dict[str, Any] = {}
    for model in BODY_MODELS:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    # The limits that are the server's settings, not the model's (validation_context).
    for name in ("JobCreate", "Rerun"):
        repeat = schemas[name]["properties"]["repeat"]
        (repeat["anyOf"][0] if "anyOf" in repeat else repeat)["maximum"] = max_repeat
    schemas["Error"] = {
        "type": "object",
        "required": ["error", "problems"],
        "properties": {
            "error": {"type": "string"},
            "problems": {
                "type": "array",
                "items": {"type": "object", "properties": {"field": {"type": "string"}, "message": {"type": "string"}}},
            },
        },
    }
    # /readyz's answer (api/health.py): 200 "ready" while no worker is alive, for jobs wait
    # queued until one starts and a readiness probe must not take the API away for that;
    # the answer says it instead (tests/api/test_health.py).
    schemas["Readiness"] = {
        "type": "object",
        "description": "What /readyz checked; 503 with status 'not ready' when a component failed",
        "required": ["status", "components"],
        "properties": {
            "status": {"type": "string", "enum": ["ready", "not ready"]},
            "components": {
                "type": "object",
                "description": "database, queue, and disk where this process runs the jobs itself: ok or failed",
                "additionalProperties": {"type": "string", "enum": ["ok", "failed"]},
            },
            "workers": {
                "type": "object",
                "description": "Where workers run the jobs and the database answered: the workers alive now",
                "required": ["live"],
                "properties": {"live": {"type": "integer", "minimum": 0}},
            },
            "warning": {
                "type": "string",
                "description": "Only while no worker is alive (the answer is still 200 and ready): "
                "jobs wait queued until one starts",
            },
        },
    }
    for name, description in (
        (
            "Job",
            "A job: status, progress, report (v1) once finished, comparison with its parent for reruns; "
            "a bisect job (kind bisect) has `bisect` instead of a report: its request and, once it ended, its result; "
            "`predicted_s` (null: unknown until the suite's first run) and `forecast`: what the job will cost, "
            "created to finished, the time it leaves while it runs and, once finished, the time it took",
        ),
        ("BisectQueued", "The bisect job stored: job_id, status (queued) and url, the job's own (also in Location)"),
        ("JobList", "Jobs, newest first; next_before_id pages on"),
        ("Finding", "A finding with its triage state and history"),
        ("FindingList", "Findings, newest first"),
        ("Delivery", "What a webhook delivery did"),
        ("WorkerList", "The workers heard from: name, node, CPUs, last heartbeat, alive or not"),
        ("Status", "Health"),
    ):
        schemas[name] = {"type": "object", "description": description}

    create = _operation(
        "Create a job on a repository (JSON) or an uploaded tarball (multipart)",
        _responses("201", "Created", "Job", ("400", "401", "413", "415", "422")),
        body="JobCreate",
    )
    create["requestBody"]["content"]["multipart/form-data"] = {
        "schema": {
            "type": "object",
            "required": ["job", "archive"],
            "properties": {
                "job": {"type": "string", "description": "JobCreate as JSON, without repository"},
                "archive": {"type": "string", "format": "binary", "description": "tar, tar.gz, tar.bz2 or tar.xz"},
            },
        }
    }
    paths = {
        "/api/v1/jobs": {
            "post": create,
            "get": _operation(
                "List jobs",
                _responses("200", "Jobs", "JobList", ("401", "422")),
                params=_query_parameters(JobListQuery),
            ),
        },
        "/api/v1/jobs/{job_id}": {
            "get": _operation(
                "A job with its progress and, once finished, its report",
                _responses("200", "The job", "Job", ("401", "404")),
                params=_path_id("job_id"),
            )
        },
        "/api/v1/jobs/{job_id}/cancel": {
            "post": _operation(
                "Cancel a queued or running job",
                _responses("200", "Cancelled", "Job", ("401", "404", "409")),
                params=_path_id("job_id"),
            )
        },
        "/api/v1/jobs/{job_id}/rerun": {
            "post": _operation(
                "Rerun the job's code under other configurations (a new job linked to it)",
                _responses("201", "The new job", "Job", ("400", "401", "404", "409", "415", "422")),
                body="Rerun",
                params=_path_id("job_id"),
            )
        },
        "/api/v1/bisects": {
            "post": _operation(
                "Bisect: which commit between good and bad changed one test's time in one configuration "
                "(a new job of kind bisect; GET its url for progress and, once it ended, bisect.result)",
                _responses("202", "Queued", "BisectQueued", ("400", "401", "415", "422")),
                body="BisectCreate",
            )
        },
        "/api/v1/findings/{finding_id}/confirm": {
            "post": _operation(
                "Screen a slower_since finding's last fast and first slow commits interleaved, base against head "
                "(a new job linked to the finding's; its verdict is a pull request's)",
                _responses("201", "The new job", "Job", ("400", "401", "404", "409", "422")),
                params=_path_id("finding_id"),
            )
        },
        "/api/v1/findings": {
            "get": _operation(
                "List findings, filtered",
                _responses("200", "Findings", "FindingList", ("401", "422")),
                params=_query_parameters(FindingListQuery),
            )
        },
        "/api/v1/findings/{finding_id}": {
            "get": _operation(
                "A finding with its triage history",
                _responses("200", "The finding", "Finding", ("401", "404")),
                params=_path_id("finding_id"),
            ),
            "patch": _operation(
                "Triage: status, assignee, note",
                _responses("200", "The finding", "Finding", ("400", "401", "404", "415", "422")),
                body="Triage",
                params=_path_id("finding_id"),
            ),
        },
        "/api/v1/artifacts/{key}": {
            "get": _operation(
                "Download an evidence artifact (key from the report's evidence[].artifacts[].key)",
                {
                    "200": {
                        "description": "The file, decompressed",
                        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
                    },
                    **{code: {"description": ERRORS[code], **_json(_ref("Error"))} for code in ("401", "404")},
                },
                params=[
                    {
                        "name": "key",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string"},
                        "description": "e.g. job-3/run-17/flamegraph.svg",
                    }
                ],
            )
        },
        "/api/v1/workers": {
            "get": _operation(
                "The workers heard from, live or not, with their last heartbeat",
                _responses("200", "Workers", "WorkerList", ("401",)),
            )
        },
        "/api/v1/webhooks/github": {"post": _webhook_operation("every known secret is tried", [])},
        "/api/v1/webhooks/github/{owner}/{name}": {
            "post": _webhook_operation(
                "only this repository's secret is tried",
                [{"name": p, "in": "path", "required": True, "schema": {"type": "string"}} for p in ("owner", "name")],
            )
        },
        OPENAPI_PATH: {"get": _operation("This document", {"200": {"description": "OpenAPI 3.1"}}, secure=False)},
        "/healthz": {"get": _operation("The process answers", _responses("200", "ok", "Status", ()), secure=False)},
        "/readyz": {
            "get": _operation(
                "Database and queue reachable; live workers counted (never a reason to be unready)",
                {
                    **_responses("200", "ready (also with no worker alive: see warning)", "Readiness", ()),
                    "503": {"description": "not ready", **_json(_ref("Readiness"))},
                },
                secure=False,
            )
        },
        "/metrics": {
            "get": _operation(
                "Prometheus metrics (Bearer LAGTRACE_METRICS_TOKEN; 403 while it is unset)",
                {
                    "200": {"description": "text exposition format"},
                    **{code: {"description": ERRORS[code], **_json(_ref("Error"))} for code in ("401", "403")},
                },
                secure=False,
            )
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "lagtrace", "version": "1", "description": "Test-latency forensics as a service"},
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }


def _webhook_operation(which: str, params: list[dict]) -> dict:
    return {
        **_operation(
            f"GitHub deliveries (HMAC-SHA256 in X-Hub-Signature-256, checked before the body is parsed: {which})",
            _responses("202", "A job was started", "Delivery", ("400", "401", "422")),
            secure=False,
        ),
        "parameters": [
            *params,
            *(
                {"name": h, "in": "header", "required": True, "schema": {"type": "string"}}
                for h in ("X-Hub-Signature-256", "X-GitHub-Delivery", "X-GitHub-Event")
            ),
        ],
    }


@bp.get("/openapi.json")
def openapi():
    return jsonify(document(ctx().settings))
