"""Celery on Redis: thin tasks (ids in, one service call, commit)."""

from worker.app import CeleryDispatcher, make_celery

__all__ = ["CeleryDispatcher", "make_celery"]
