"""The Flask JSON API and the GitHub webhook receiver (thin: parse, call services/, map errors)."""

from api.app import register

__all__ = ["register"]
