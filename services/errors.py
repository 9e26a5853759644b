"""Domain errors, each carrying its HTTP status and its CLI exit code.

The API (api/errors.py) and the CLI (cli/main.py) read these two attributes in one
place each; a new error class says here how it surfaces, nowhere else. Exit code 2
means "change what you asked for" (every 4xx, as `lagtrace submit` maps the API's
answers), 1 "it failed".
"""

import re

# A message that starts with the field it is about, as this project writes them:
# "repository.url 'ftp://x': only https://", "image: applies to ...".
_LEADING_FIELD = re.compile(r"^([a-z_][a-z0-9_]*(?:\.[a-z0-9_]+)*)(?::| '| \")")


class LagtraceError(Exception):
    """Something went wrong that is not the user's input."""

    http_status = 500
    exit_code = 1


class BadInput(LagtraceError):
    """The request cannot be run as given; the message says what to change, and ``field``
    which part of the request (the API's `problems[].field`): given, or the field the
    message starts with."""

    http_status = 422
    exit_code = 2

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        match = _LEADING_FIELD.match(message)
        self.field = field or (match.group(1) if match else None)


class ScratchExceeded(LagtraceError):
    """A job's runs wrote more to the worker's disk than a cap allows, one run's or its
    step's summed over its runs (services/measure/executors/scratch.py); the message names
    the cap and the setting that raises it. The job's own doing: its step fails and the
    attempt counts, never given back as the disk's fault (services/jobs/lease.py). No
    BadInput, which the drill and the confirm step take for a tool that could not start
    and go on past."""

    http_status = 422
    exit_code = 2


class Unauthorized(LagtraceError):
    """No valid API token: the message says what is wrong, never whose token it was."""

    http_status = 401
    exit_code = 2


class SignInFailed(LagtraceError):
    """A dashboard sign-in was refused (one message for every reason, on purpose)."""

    http_status = 401
    exit_code = 2


class NotFound(LagtraceError):
    """The thing asked for does not exist (or belongs to another project)."""

    http_status = 404
    exit_code = 2


class Conflict(LagtraceError):
    """The request is valid but the current state does not allow it (e.g. cancel a finished job)."""

    http_status = 409
    exit_code = 2


class ServiceUnreachable(LagtraceError):
    """The database or the broker did not answer: the environment, not the request."""

    http_status = 503
    exit_code = 1


class EngineUnavailable(ServiceUnreachable):
    """The Docker engine did not answer (refused, reset, timed out) or failed (5xx): the
    environment, never the command. A service step waits it out and is given back to the
    ledger; for `lagtrace run` the fix is the user's (start one, or --executor local).
    ``answered``: the engine did answer, with a server error (5xx) or by reporting a container
    killed from outside, so it is up: the attempt counts (services/jobs/lease.py)."""

    exit_code = 2

    def __init__(self, message: str, *, answered: bool = False):
        super().__init__(message)
        self.answered = answered


class Misconfigured(LagtraceError):
    """A LAGTRACE_* setting names something this process cannot use; the message names it."""

    http_status = 500
    exit_code = 1


class MigrationLocked(LagtraceError):
    """Another migration held the schema lock past the wait allowed (Settings.migrate_lock_wait_s)."""

    http_status = 503
    exit_code = 1
