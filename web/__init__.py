"""The dashboard: server-rendered Flask + Jinja pages over the same services as the API."""

from web.app import register
from web.views import error_page

__all__ = ["error_page", "register"]
