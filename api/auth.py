"""Bearer tokens: every /api/v1 route but the webhook and the OpenAPI document needs one."""

from __future__ import annotations

from flask import g, request

from api.context import db
from services.accounts.tokens import Caller, authenticate


def caller() -> Caller:
    if "caller" not in g:
        g.caller = authenticate(db(), request.headers.get("Authorization"))
    return g.caller
