"""Domain errors and HTTP errors to JSON, in one place.

Every error body is {"error": message, "problems": [{"field", "message"}]} so clients
(and `lagtrace submit`) can show the field that is wrong.
"""

from __future__ import annotations

import logging
import math

from flask import Flask, jsonify, request
from pydantic import ValidationError
from sqlalchemy.exc import DBAPIError
from werkzeug.exceptions import HTTPException

from services.db import unreachable
from services.errors import LagtraceError
from services.jobs.sources import validation_problems

log = logging.getLogger("lagtrace.api")


class BadRequest(Exception):
    """Malformed request (not JSON, wrong content type, bad query string): 400, 415 or 422."""

    def __init__(self, message: str, status: int = 400, problems: list[dict] | None = None):
        super().__init__(message)
        self.status = status
        self.problems = problems or []


def _request_field(status: int) -> str | None:
    """The part of the request a 4xx without a field of its own is about: the token's
    header, the id in the path, the body; None for a 5xx (nothing the client sent)."""
    if status == 401:
        # A GitHub delivery is signed, not authorised with a token.
        return "header.X-Hub-Signature-256" if "X-GitHub-Event" in request.headers else "header.Authorization"
    if status in (404, 409) and request.view_args:
        return "path." + next(iter(request.view_args))
    return {
        404: "path",
        405: "method",
        413: "(body)",
        415: "header.Content-Type",
        429: "header.Authorization",  # the limit counts per token (or per address)
    }.get(status, "(body)" if status == 400 else None)


def error_response(status: int, message: str, problems: list[dict] | None = None):
    if not problems and 400 <= status < 500:
        # Every 4xx names what to change (docs/reference/api.md promises it); clients read problems[].
        field = _request_field(status)
        problems = [{"field": field, "message": message}] if field else []
    response = jsonify({"error": message, "problems": problems or []})
    response.status_code = status
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="lagtrace"'
    return response


def register(app: Flask) -> None:
    @app.errorhandler(ValidationError)
    def _invalid(exc: ValidationError):
        problems = validation_problems(exc)
        return error_response(422, "; ".join(f"{p['field']}: {p['message']}" for p in problems), problems)

    @app.errorhandler(BadRequest)
    def _bad_request(exc: BadRequest):
        return error_response(exc.status, str(exc), exc.problems)

    @app.errorhandler(LagtraceError)
    def _domain(exc: LagtraceError):
        status = exc.http_status  # each domain error carries its status (services/errors.py)
        if status == 500:
            log.error("request failed: %s", exc)
            return error_response(500, f"internal error: {exc}")
        field = getattr(exc, "field", None)
        response = error_response(status, str(exc), [{"field": field, "message": str(exc)}] if field else None)
        retry_after = getattr(exc, "retry_after_s", None)  # a rate limit says when to come back
        if retry_after is not None:
            response.headers["Retry-After"] = str(max(1, math.ceil(retry_after)))
        return response

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException):
        return error_response(exc.code or 500, exc.description or exc.name)

    @app.errorhandler(DBAPIError)
    def _database(exc: DBAPIError):
        if not unreachable(exc):
            log.exception("database error")
            return error_response(500, "internal error (see the server log)")
        # Nothing was stored; the client may send the same request again (jobs started by a
        # webhook are deduplicated by delivery id).
        log.warning("database unreachable: %s", exc)
        response = error_response(503, "the database is unavailable: nothing was stored; try again in a minute")
        response.headers["Retry-After"] = "30"
        return response

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception):
        log.exception("unhandled error")
        return error_response(500, "internal error (see the server log)")
