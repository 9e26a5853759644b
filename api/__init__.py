"""The Flask JSON API and the GitHub webhook receiver (thin: parse, call services/, map errors)."""

from api.app import API_PATHS, register
from api.errors import body_limit_message, http_error

__all__ = ["API_PATHS", "body_limit_message", "http_error", "register"]
