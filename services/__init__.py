"""lagtrace's domain layer: settings, database, executors, statistics, rules, reports.

Nothing here imports Flask or Celery (an import-linter contract in pyproject.toml
checks it), so the CLI, the API and the workers all share the same code.
"""
