#!/bin/sh
# The image's roles (tini runs this as its child; `exec` makes lagtrace that child, so
# SIGTERM reaches it directly):
#   api       the API and dashboard on waitress, port $LAGTRACE_PORT (8080)
#   worker    a Celery worker (one measured run at a time unless told otherwise)
#   beat      the periodic reconciler's scheduler, one per cluster
#   migrate   bring the database schema to head (the chart's pre-install/upgrade hook)
# Anything else runs as given, e.g. `lagtrace token create --project octo/demo`.
set -eu

# Run directories are made under TMPDIR (tempfile.mkdtemp); the chart points it into the
# volume the worker shares with its engine, which may start out empty.
if [ -n "${TMPDIR:-}" ]; then mkdir -p "$TMPDIR"; fi

role=${1:-api}
[ $# -gt 0 ] && shift

case "$role" in
    api)
        exec lagtrace serve --host "${LAGTRACE_HOST:-0.0.0.0}" --port "${LAGTRACE_PORT:-8080}" \
            --threads "${LAGTRACE_THREADS:-8}" "$@" ;;
    worker)
        exec lagtrace worker --concurrency "${LAGTRACE_WORKER_CONCURRENCY:-1}" "$@" ;;
    beat)
        exec lagtrace beat "$@" ;;
    migrate)
        exec lagtrace migrate "$@" ;;
    *)
        exec "$role" "$@" ;;
esac
