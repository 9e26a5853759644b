"""The Flask JSON API and the GitHub webhook receiver (thin: parse, call services/, map errors)."""

from api.app import API_PATHS, register
from api.errors import http_error

__all__ = ["API_PATHS", "http_error", "register"]
