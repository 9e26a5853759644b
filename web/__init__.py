"""The dashboard: server-rendered Flask + Jinja pages over the same services as the API."""

from web.app import register

__all__ = ["register"]
