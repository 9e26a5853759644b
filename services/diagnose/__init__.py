"""Rules that turn a job's stored metrics and evidence into findings."""

from services.diagnose.diagnose import diagnose

__all__ = ["diagnose"]
