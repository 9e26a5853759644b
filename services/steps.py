"""Every ledger step's handler in one table, and the step runner the worker and `lagtrace
serve` call: the job engine's phases (services/jobs/engine.py) and the GitHub check run
(services/github/notify.py).

Put together here, above both: GitHub is an adapter over the jobs, so services.jobs never
imports services.github (pyproject.toml's import-linter contracts).
"""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from services.github.notify import notify_github
from services.jobs import bisect_step, engine, lease
from services.jobs.dispatch import BISECT, NOTIFY, Step
from services.settings import Settings

# A bisect job's step is its own module's (the engine's hub stays small).
HANDLERS: dict[str, lease.Handler] = {**engine.HANDLERS, BISECT: bisect_step.bisect_step, NOTIFY: notify_github}


def run_step(session_factory: sessionmaker[Session], settings: Settings, step: Step) -> None:
    """One ledger step in its own session, under its lease (services/jobs/lease.py)."""
    lease.run_step(session_factory, settings, step, HANDLERS)
