"""Executors run one command under one CPU configuration and measure it."""

from __future__ import annotations

from services.errors import BadInput
from services.executors.base import Executor, RunRequest, RunResult
from services.executors.local import LocalExecutor
from services.settings import Settings

EXECUTORS = ("auto", "local")


def make_executor(name: str, settings: Settings) -> Executor:
    if name in ("local", "auto"):
        # `auto` will prefer docker when that executor exists and an engine answers.
        return LocalExecutor(settings)
    raise BadInput(f"unknown executor {name!r} (known: {', '.join(EXECUTORS)})")


__all__ = ["EXECUTORS", "Executor", "LocalExecutor", "RunRequest", "RunResult", "make_executor"]
