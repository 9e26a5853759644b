"""The outbox: steps recorded in a transaction are sent once it commits, never before.

A worker that received a step before its ledger row was committed would find nothing to
claim, so the message would be lost until the reconciler resent it. Every session
collects its steps in ``session.info`` (``send_after_commit``); one ``after_commit``
listener hands them to the dispatcher bound to the session's factory (``bind``), and a
transaction that ends without committing drops them. This is warehouse's after-commit
task hook and Celery's ``delay_on_commit``, for SQLAlchemy: no caller sends by hand.
"""

from __future__ import annotations

import logging

from sqlalchemy import event
from sqlalchemy.orm import Session, SessionTransaction, sessionmaker

from services.jobs.dispatch import Dispatcher, Step

log = logging.getLogger("lagtrace.outbox")

_OUTBOX = "lagtrace.outbox"
_DISPATCHER = "lagtrace.dispatcher"


def bind(session_factory: sessionmaker[Session], dispatcher: Dispatcher) -> sessionmaker[Session]:
    """Sessions made by ``session_factory`` from now on send their steps to ``dispatcher``."""
    session_factory.configure(info={_DISPATCHER: dispatcher})
    return session_factory


def send_after_commit(session: Session, step: Step) -> None:
    session.info.setdefault(_OUTBOX, []).append(step)


def pending(session: Session) -> list[Step]:
    """The steps this session's transaction will send if it commits (for tests and logs)."""
    return list(session.info.get(_OUTBOX, []))


@event.listens_for(Session, "after_commit")
def _send(session: Session) -> None:
    if session.in_nested_transaction():
        # A savepoint released (begin_nested) fires after_commit too, while the steps' rows
        # are still uncommitted: they go with the outermost commit (tests/services/jobs/test_outbox.py).
        return
    steps: list[Step] = session.info.pop(_OUTBOX, [])
    if not steps:
        return
    dispatcher: Dispatcher | None = session.info.get(_DISPATCHER)
    if dispatcher is None:
        # `lagtrace run` and the tests' bare sessions record steps no process will run.
        log.debug("no dispatcher bound: %d steps stay in the ledger", len(steps))
        return
    for step in steps:
        try:
            dispatcher.send(step)
        except Exception:
            # The ledger row is committed: the reconciler resends it once its lease expires.
            log.exception("could not queue %s for job %s; the reconciler will resend it", step.task_name, step.job_id)


@event.listens_for(Session, "after_transaction_end")
def _drop_uncommitted(session: Session, transaction: SessionTransaction) -> None:
    # after_commit has already emptied the outbox of a committed transaction; what is
    # left when the outermost transaction ends was rolled back (or closed uncommitted).
    if transaction.nested or transaction.parent is not None:
        return
    dropped = session.info.pop(_OUTBOX, None)
    if dropped:
        log.debug("transaction rolled back: %d steps not sent", len(dropped))
