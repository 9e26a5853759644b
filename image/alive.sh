#!/bin/sh
# Liveness of a worker or beat: its heartbeat file was touched within MAX_AGE seconds.
# The worker touches it from its main loop (worker/app.py), so a worker stuck on a lost
# broker connection goes stale while one busy with a long measured run stays fresh.
#   lagtrace-alive [MAX_AGE]     (file: $LAGTRACE_WORKER_HEARTBEAT_FILE)
set -eu
file=${LAGTRACE_WORKER_HEARTBEAT_FILE:?LAGTRACE_WORKER_HEARTBEAT_FILE is not set}
max_age=${1:-60}
if [ ! -f "$file" ]; then
    echo "lagtrace-alive: no heartbeat file $file" >&2
    exit 1
fi
age=$(( $(date +%s) - $(stat -c %Y "$file") ))
if [ "$age" -gt "$max_age" ]; then
    echo "lagtrace-alive: heartbeat $file is ${age}s old (limit ${max_age}s)" >&2
    exit 1
fi
