"""Bearer tokens: every /api/v1 route but the webhook and the OpenAPI document needs one."""

from __future__ import annotations

from flask import g, request

from services.accounts.tokens import Caller, authenticate
from services.context import db


def caller() -> Caller:
    if "caller" not in g:
        session = db()
        g.caller = authenticate(session, request.headers.get("Authorization"))
        if g.caller.touched:
            # The token's "last used" (at most once a minute) in a transaction of its own:
            # a read never commits, so it was never kept, and its row lock was held to the
            # end of every request, queueing all requests made with the same token.
            session.commit()
    return g.caller
