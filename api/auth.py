"""Bearer tokens: every /api/v1 route but the webhook and the OpenAPI document needs one."""

from __future__ import annotations

from flask import g, request

from services.accounts.tokens import Caller, authenticate
from services.context import db


def caller() -> Caller:
    if "caller" not in g:
        g.caller = authenticate(db(), request.headers.get("Authorization"))
    return g.caller
