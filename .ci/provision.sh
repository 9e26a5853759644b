#!/usr/bin/env bash
# What the service quickstart and the test suite need, idempotently: the Debian packages of
# .ci/apt-packages*.txt, a PostgreSQL server on 127.0.0.1:54329, Redis on 127.0.0.1:63799,
# a Docker engine and the runner image; then the connection settings in .state/test.env for
# `make test` to read. The chart's tooling (Helm built from source, the service image) is
# not here: .ci/provision-chart.sh makes it, run by .ci/chart.sh and by the chart's and the
# image's tests when they run.
#
# Root is needed only for what is missing. As root, or with a working sudo, it is done
# here; as an ordinary user without sudo, the script names what is missing and the one
# command root runs (`.ci/provision.sh --system`), then exits 1. Once everything answers
# (the engine, PostgreSQL, the image, the packages), an ordinary user needs no root at all.
#
#   .ci/provision.sh            everything, then .state/test.env
#   .ci/provision.sh --system   only what needs root (packages, engine, image, PostgreSQL)
set -euo pipefail
cd "$(dirname "$0")/.."
system_only=false
case "${1:-}" in
  "") ;;
  --system) system_only=true ;;
  *) echo "usage: .ci/provision.sh [--system]" >&2; exit 2 ;;
esac

say() { echo "provision: $*" >&2; }
started=$(date +%s)
elapsed() { echo "$(($(date +%s) - started)) s"; }

# --- What is missing -------------------------------------------------------------
pg_port=54329
pg_dir=/var/tmp/lagtrace-pg
packages=$(sed 's/#.*//' .ci/apt-packages*.txt | tr -s ' \n' '\n' | sort -u)
missing=()
for pkg in $packages; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
pg_up() { [ -n "$pg_bin" ] && "$pg_bin/pg_isready" -q -h 127.0.0.1 -p "$pg_port"; }
engine_up() { docker info >/dev/null 2>&1; }
# The tag build-offline.sh gives the image (a hash of its recipe), so an unchanged recipe
# is found without building; tests/e2e/test_provision.py fails if the two part ways.
runner_dir=services/measure/executors/runner
runner="lagtrace-runner:$(cat "$runner_dir/build-offline.sh" "$runner_dir/packages.txt" | sha256sum | cut -c1-12)"
image_there() { docker image inspect "$runner" >/dev/null 2>&1; }

needs=()
[ ${#missing[@]} -eq 0 ] || needs+=("Debian packages: ${missing[*]}")
engine_up || needs+=("a Docker engine that answers $(id -un)")
{ engine_up && image_there; } || needs+=("the runner image $runner")
pg_up || needs+=("PostgreSQL on 127.0.0.1:$pg_port")

# --- Root, if anything needs it -----------------------------------------------------
AS_ROOT=()
if [ ${#needs[@]} -gt 0 ] && [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && { sudo -n true 2>/dev/null || [ -t 0 ]; }; then
    AS_ROOT=(sudo)  # passwordless, or it asks on this terminal
  else
    why="sudo is not installed"
    command -v sudo >/dev/null 2>&1 && why="sudo needs a password and there is no terminal to ask on"
    say "missing, and only root can provide it ($why):"
    for need in "${needs[@]}"; do say "  - $need"; done
    if ! engine_up && [ -S /var/run/docker.sock ] && ! id -nG | tr ' ' '\n' | grep -qx docker; then
      say "  - and $(id -un) in the docker group: as root, usermod -aG docker $(id -un), then sign in again"
    fi
    say "as root, run:"
    say "    $PWD/.ci/provision.sh --system"
    say "then run .ci/provision.sh again as $(id -un): it needs no root once these answer."
    exit 1
  fi
fi
as_root() { "${AS_ROOT[@]}" "$@"; }
as_postgres() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else sudo -u postgres "$@"; fi; }

# --- Debian packages ------------------------------------------------------------------
# The engine and debootstrap first (seconds): the runner image then builds in the
# background while apt installs the rest (its debootstrap and chroot use apt of their
# own, not the host's lock). On a fresh bookworm here the two took 80 s and 91 s one
# after the other, 109 s side by side.
apt_install() {
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
if [ ${#missing[@]} -gt 0 ]; then
  # update only when the package lists are missing or older than a day
  if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mmin -1440 2>/dev/null | head -1)" ]; then
    say "apt-get update"
    as_root apt-get update -qq
  fi
fi
first=()
# docker.io only where no engine is installed (a machine with Docker's own packages keeps them).
command -v dockerd >/dev/null 2>&1 || engine_up || first+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || image_there || first+=(debootstrap)
if [ ${#first[@]} -gt 0 ]; then
  say "installing ${first[*]}"
  apt_install "${first[@]}"
fi

# --- Docker engine and the runner image -------------------------------------------------
# No registry here: the engine runs without a bridge and the image is built offline
# (debootstrap + docker import), cached by a tag that hashes its recipe.
engine_up || as_root .ci/docker-engine.sh
image_log=$(mktemp)
image_pid=""
if ! image_there; then
  say "building the runner image $runner in the background (log: $image_log)"
  as_root services/measure/executors/runner/build-offline.sh >"$image_log" 2>&1 &
  image_pid=$!
fi

if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  apt_install "${missing[@]}"
  [ -n "$pg_bin" ] || pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  say "packages installed ($(elapsed))"
fi

# --- PostgreSQL --------------------------------------------------------------------
# A private cluster owned by the postgres user (the server refuses to run as root),
# on its own port so it never collides with a system cluster.
if ! pg_up; then
  as_root mkdir -p "$pg_dir"
  as_root chown postgres: "$pg_dir"
  if ! as_root test -f "$pg_dir/data/PG_VERSION"; then
    say "creating a PostgreSQL cluster in $pg_dir"
    as_postgres "$pg_bin/initdb" -D "$pg_dir/data" -A trust -U postgres >/dev/null
  fi
  say "starting PostgreSQL on 127.0.0.1:$pg_port"
  (cd / && as_postgres "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/server.log" -w \
    -o "-p $pg_port -k $pg_dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" start >/dev/null)
fi

if [ -n "$image_pid" ]; then
  if ! wait "$image_pid"; then
    cat "$image_log" >&2
    say "building the runner image failed"
    exit 1
  fi
  say "runner image built ($(elapsed))"
fi
rm -f "$image_log"
$system_only && { say "system part ready ($(elapsed))"; exit 0; }

# --- Redis (the Celery broker): any user may run it -------------------------------------
redis_url=$(.ci/redis.sh)

state="$PWD/.state"
mkdir -p "$state"
cat > "$state/test.env" <<ENV
export LAGTRACE_TEST_POSTGRES_URL=postgresql+psycopg://postgres@127.0.0.1:$pg_port/postgres
# dockerd runs with --bridge=none, so the prepare step's pip reaches PyPI through the host network.
export LAGTRACE_DOCKER_PREPARE_NETWORK=host
export LAGTRACE_TEST_REDIS_URL=$redis_url
ENV
say "ready in $(elapsed) ($state/test.env); the chart's tooling: .ci/provision-chart.sh"
