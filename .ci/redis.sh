#!/usr/bin/env bash
# Starts a private Redis for the tests on 127.0.0.1:63799 unless one already answers
# there, then prints its URL. Idempotent; .ci/provision.sh exports the URL as
# LAGTRACE_TEST_REDIS_URL.
set -euo pipefail
port=63799
dir=/var/tmp/lagtrace-redis
if ! redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1; then
  mkdir -p "$dir"
  # No persistence: the tests own every key, and a broker restart loses nothing the
  # database does not record.
  redis-server --bind 127.0.0.1 --port "$port" --daemonize yes --dir "$dir" \
    --logfile "$dir/redis.log" --pidfile "$dir/redis.pid" --save '' --appendonly no >/dev/null
  for _ in $(seq 50); do
    redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
  redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null
fi
echo "redis://127.0.0.1:$port/0"
