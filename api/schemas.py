"""Request bodies and query strings, validated by pydantic (messages name the field)."""

from __future__ import annotations

import json
from typing import Literal, TypeVar

from flask import request
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from api.errors import BadRequest
from services.context import ctx
from services.diagnose.findings import Severity
from services.jobs.bisect_jobs import BisectSpec
from services.jobs.sources import validation_problems
from services.jobs.spec import JobSpec, RerunSpec, validation_context

JOB_STATUSES = Literal["queued", "running", "done", "failed", "cancelled"]
TRIAGE_STATUSES = Literal["new", "acknowledged", "muted", "fixed"]
M = TypeVar("M", bound=BaseModel)


class Repository(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str = Field(min_length=1, max_length=2000, description="git URL (https, ssh, git; file where allowed)")
    ref: str | None = Field(None, min_length=1, max_length=255, description="Branch, tag or commit (default HEAD)")


class JobCreate(JobSpec):
    """A job on a repository (JSON), or on an uploaded tarball (multipart: `job` + `archive`)."""

    repository: Repository | None = None


class Rerun(RerunSpec):
    """The body of POST /jobs/{id}/rerun."""


class BisectCreate(BisectSpec):
    """The body of POST /bisects: which commit between good and bad changed one test's time."""


class Triage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    status: TRIAGE_STATUSES | None = None
    assignee: str | None = Field(None, max_length=200)
    note: str | None = Field(None, max_length=10000)

    @field_validator("status")
    @classmethod
    def _status_not_null(cls, value: str | None) -> str | None:
        # Runs only when status is sent, so the error is the field's, not the body's.
        if value is None:
            raise ValueError("cannot be null (new, acknowledged, muted, fixed)")
        return value

    @model_validator(mode="after")
    def _something_to_change(self) -> Triage:
        if not self.model_fields_set:
            raise ValueError("send at least one of status, assignee, note")
        return self


class JobListQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")
    status: JOB_STATUSES | None = None
    limit: int = Field(50, ge=1, le=200)
    before_id: int | None = Field(None, ge=1)


class FindingListQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")
    job_id: int | None = Field(None, ge=1)
    kind: str | None = Field(None, max_length=32)
    status: TRIAGE_STATUSES | None = None
    severity: Severity | None = None
    fingerprint: str | None = Field(None, max_length=64)
    test: str | None = None
    limit: int = Field(100, ge=1, le=500)
    before_id: int | None = Field(None, ge=1)


def json_body(model: type[M]) -> M:
    if request.mimetype != "application/json":
        message = f"send the body as application/json, not {request.mimetype or 'nothing'}"
        raise BadRequest(message, 415, [{"field": "header.Content-Type", "message": message}])
    return parse_json_text(model, request.get_data(), "body")


def parse_json_text(model: type[M], raw: bytes | str, what: str, field: str = "(body)") -> M:
    try:
        data = json.loads(raw)
    except ValueError as exc:
        message = f"{what} is not valid JSON: {exc}"
        raise BadRequest(message, 400, [{"field": field, "message": message}]) from None
    # The server's own limits (the repeat limit) are checked beside the other fields.
    return model.model_validate(data, context=validation_context(ctx().settings))


def query(model: type[M]) -> M:
    try:
        return model.model_validate(request.args.to_dict())
    except ValidationError as exc:
        problems = validation_problems(exc, "query.")
        raise BadRequest("; ".join(f"{p['field']}: {p['message']}" for p in problems), 422, problems) from None
