"""Credentials out of text that others read: logs, and the public /readyz's log lines."""

from __future__ import annotations

import re

# scheme://user:password@host (the user too: a Redis URL often puts the password there).
CREDENTIALS_IN_URL = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]*@")
PASSWORD_PARAMETER = re.compile(r"(?i)(password|passwd|pwd|secret|token)=[^&\s]+")


def redact(text: str) -> str:
    """``text`` with every URL's credentials and password-like query parameters as ***."""
    text = CREDENTIALS_IN_URL.sub(lambda m: m.group("scheme") + "***@", text)
    return PASSWORD_PARAMETER.sub(lambda m: m.group(1) + "=***", text)
