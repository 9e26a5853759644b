"""Domain errors and HTTP errors to JSON, in one place.

Every error body is {"error": message, "problems": [{"field", "message"}]} so clients
(and `lagtrace submit`) can show the field that is wrong.
"""

from __future__ import annotations

import logging

from flask import Flask, jsonify
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


def error_response(status: int, message: str, problems: list[dict] | None = None):
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
        return error_response(status, str(exc))

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
