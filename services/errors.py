"""Domain errors. The CLI maps them to exit 2 (BadInput) or 1; the API to HTTP codes."""


class LagtraceError(Exception):
    """Something went wrong that is not the user's input."""


class BadInput(LagtraceError):
    """The request cannot be run as given; the message says what to change."""


class NotFound(LagtraceError):
    """The thing asked for does not exist (or belongs to another project)."""


class Conflict(LagtraceError):
    """The request is valid but the current state does not allow it (e.g. cancel a finished job)."""
