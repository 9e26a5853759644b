"""The dashboard: server-rendered Flask + Jinja pages over the same services as the API."""

from web.app import create_combined_app, register

__all__ = ["create_combined_app", "register"]
