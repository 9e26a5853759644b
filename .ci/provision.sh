#!/usr/bin/env bash
# Installs and starts everything the test suite needs, idempotently, then writes the
# connection settings to .state/test.env for `make test` to read.
#   Debian packages from .ci/apt-packages*.txt, a PostgreSQL server on 127.0.0.1:54329.
set -euo pipefail
cd "$(dirname "$0")/.."
state="$PWD/.state"
mkdir -p "$state"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

say() { echo "provision: $*" >&2; }
as_postgres() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else sudo -u postgres "$@"; fi; }

# --- Debian packages -------------------------------------------------------
missing=()
for pkg in $(cat .ci/apt-packages*.txt | sed 's/#.*//' | tr -s ' \n' '\n' | sort -u); do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- PostgreSQL --------------------------------------------------------------
# A private cluster owned by the postgres user (the server refuses to run as root),
# on its own port so it never collides with a system cluster.
pg_port=54329
pg_dir=/var/tmp/lagtrace-pg
pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
if ! "$pg_bin/pg_isready" -q -h 127.0.0.1 -p "$pg_port"; then
  $SUDO mkdir -p "$pg_dir"
  $SUDO chown postgres: "$pg_dir"
  if [ ! -f "$pg_dir/data/PG_VERSION" ]; then
    say "creating a PostgreSQL cluster in $pg_dir"
    as_postgres "$pg_bin/initdb" -D "$pg_dir/data" -A trust -U postgres >/dev/null
  fi
  say "starting PostgreSQL on 127.0.0.1:$pg_port"
  (cd / && as_postgres "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/server.log" -w \
    -o "-p $pg_port -k $pg_dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" start >/dev/null)
fi

# --- Docker engine and the runner image -------------------------------------------
# No registry here: the engine runs without a bridge and the image is built offline
# (debootstrap + docker import), cached by a tag that hashes its recipe.
$SUDO .ci/docker-engine.sh
$SUDO services/measure/executors/runner/build-offline.sh

# --- Redis (the Celery broker) ----------------------------------------------------
redis_url=$(.ci/redis.sh)

# --- Kubernetes: Helm (from source, cached per machine) and the service image ------
# The image is built offline like the runner image, cached by a hash of its context.
helm_bin=$($SUDO .ci/helm.sh)
service_image=$($SUDO .ci/build-service-image.sh)

cat > "$state/test.env" <<ENV
export LAGTRACE_TEST_POSTGRES_URL=postgresql+psycopg://postgres@127.0.0.1:$pg_port/postgres
# dockerd runs with --bridge=none, so the prepare step's pip reaches PyPI through the host network.
export LAGTRACE_DOCKER_PREPARE_NETWORK=host
export LAGTRACE_TEST_REDIS_URL=$redis_url
export LAGTRACE_HELM=$helm_bin
export LAGTRACE_TEST_SERVICE_IMAGE=$service_image
ENV
say "ready ($state/test.env)"
