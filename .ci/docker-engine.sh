#!/bin/sh
# Make a Docker engine answer on this machine (DESIGN.md section 8), idempotently.
#
# No container registry is reachable and the machine has no bridge/iptables support, so
# the engine runs with --iptables=false --bridge=none: lagtrace's measured runs use
# --network none anyway, and the prepare step uses the host network here
# (LAGTRACE_DOCKER_PREPARE_NETWORK=host).
set -eu

LOG=${LAGTRACE_DOCKERD_LOG:-/var/log/lagtrace-dockerd.log}

engine_answers() { docker info >/dev/null 2>&1; }

if engine_answers; then
    echo "docker-engine: an engine already answers" >&2
    exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
    echo "docker-engine: installing docker.io" >&2
    # update only when the package lists are missing or stale (a day), to stay quick on reruns
    if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mmin -1440 2>/dev/null | head -1)" ]; then
        apt-get update -qq
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io >/dev/null
fi

if ! pgrep -x dockerd >/dev/null 2>&1; then
    echo "docker-engine: starting dockerd (log: $LOG)" >&2
    # setsid: the engine must outlive the shell (and CI step) that started it
    setsid dockerd --iptables=false --bridge=none >>"$LOG" 2>&1 </dev/null &
fi

tries=0
until engine_answers; do
    tries=$((tries + 1))
    if [ "$tries" -ge 60 ]; then
        echo "docker-engine: dockerd did not answer within 30 s; last log lines:" >&2
        tail -n 20 "$LOG" >&2 || true
        exit 1
    fi
    sleep 0.5
done
echo "docker-engine: engine answers ($(docker version --format '{{.Server.Version}}'))" >&2
