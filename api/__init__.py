"""The Flask JSON API and the GitHub webhook receiver (thin: parse, call services/, map errors)."""

from api.app import create_app

__all__ = ["create_app"]
