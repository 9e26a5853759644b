#!/bin/sh
# Build the service image (the top-level Dockerfile) where no container registry answers
# (DESIGN.md section 8): debootstrap Debian trixie (the Dockerfile's
# debian:trixie-slim) into a base image, as the runner
# image is built, then `docker build` the same Dockerfile on it (--build-arg BASE=...).
# Both paths share every instruction, and tests/image/ checks the result's entrypoint.
#
# Cached by tag: the base's tag hashes this script, the image's tag hashes the build
# context, so an unchanged tree is never rebuilt and a source edit rebuilds only the
# last layers (dependencies are a layer of their own). Prints the image reference.
#
#   .ci/build-service-image.sh [NAME]     (default NAME: lagtrace; also tagged NAME:latest)
# Run it under the shared lock: flock /tmp/lagtrace-cpu.lock .ci/build-service-image.sh
set -eu
cd "$(dirname "$0")/.."
NAME=${1:-lagtrace}
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
root_or_say() {  # the base image needs root (debootstrap); say how instead of "sudo: not found"
    [ -z "$SUDO" ] && return 0
    command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null && return 0
    [ -t 0 ] && command -v sudo >/dev/null 2>&1 && return 0
    echo "build-service-image: building its base needs root; as root, run: $PWD/.ci/provision-chart.sh image" >&2
    exit 1
}

# The host's own CA certificates (a TLS-inspecting proxy's, say) go into the base, so the
# build's apt and pip trust what the host trusts; they are part of the base's tag.
HOST_CAS=$(find /usr/local/share/ca-certificates -name '*.crt' -type f 2>/dev/null | LC_ALL=C sort)
BASE="lagtrace-trixie:$( { cat .ci/build-service-image.sh; [ -z "$HOST_CAS" ] || cat $HOST_CAS; } | sha256sum | cut -c1-12)"
# Exactly what .dockerignore lets into the context, minus bytecode.
CONTEXT_FILES=$(find Dockerfile .dockerignore pyproject.toml README.md services api web worker cli migrations \
    -type f ! -name '*.pyc' ! -path '*/__pycache__/*' | LC_ALL=C sort)
TAG=$( { echo "$BASE"; echo "$CONTEXT_FILES" | xargs sha256sum; } | sha256sum | cut -c1-12)
IMAGE="$NAME:$TAG"

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "build-service-image: $IMAGE exists, nothing to build" >&2
    docker tag "$IMAGE" "$NAME:latest"
    echo "$IMAGE"
    exit 0
fi

# --- the base: a minimal trixie, the stand-in for debian:trixie-slim -----------------
if ! docker image inspect "$BASE" >/dev/null 2>&1; then
    root_or_say
    mirror_of() {  # $1: path suffix, e.g. /debian; the host apt's first such mirror
        cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
            | grep -v '^[[:space:]]*#' | grep -o "https\?://[^[:space:]]*$1/\?\([[:space:]]\|\$\)" \
            | head -n 1 | tr -d '[:space:]' | sed 's:/$::'
    }
    MIRROR=$(mirror_of /debian)
    MIRROR=${MIRROR:-http://deb.debian.org/debian}
    SECURITY=$(mirror_of /debian-security)
    command -v debootstrap >/dev/null 2>&1 || \
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
    ROOT=$(mktemp -d /var/tmp/lagtrace-trixie.XXXXXX)
    trap '$SUDO rm -rf "$ROOT" "$ROOT.log"' EXIT INT TERM
    echo "build-service-image: debootstrap trixie from $MIRROR into $ROOT" >&2
    $SUDO debootstrap --variant=minbase trixie "$ROOT" "$MIRROR" >"$ROOT.log" 2>&1 || {
        tail -n 30 "$ROOT.log" >&2; exit 1; }
    {
        echo "deb $MIRROR trixie main"
        echo "deb $MIRROR trixie-updates main"
        [ -n "$SECURITY" ] && echo "deb $SECURITY trixie-security main"
    } | $SUDO tee "$ROOT/etc/apt/sources.list" >/dev/null
    if [ -n "$HOST_CAS" ]; then
        # Picked up by update-ca-certificates when the Dockerfile installs ca-certificates.
        $SUDO mkdir -p "$ROOT/usr/local/share/ca-certificates"
        $SUDO cp $HOST_CAS "$ROOT/usr/local/share/ca-certificates/"
    fi
    # What debian:trixie-slim drops: package caches, docs; the engine provides resolv.conf.
    $SUDO sh -c "rm -rf '$ROOT'/var/cache/apt/archives/*.deb '$ROOT'/var/lib/apt/lists/* \
        '$ROOT'/usr/share/doc/* '$ROOT'/usr/share/man/* && : >'$ROOT/etc/resolv.conf'"
    echo "build-service-image: importing $BASE" >&2
    $SUDO tar -C "$ROOT" --numeric-owner -c . | docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["bash"]' \
        --change 'LABEL org.lagtrace.base=offline-trixie' \
        - "$BASE" >/dev/null
fi

# --- the service image: the Dockerfile itself ----------------------------------------
# The legacy builder uses a local FROM image without asking a registry; --network host
# because this engine has no bridge (its RUN steps fetch Debian packages and wheels).
echo "build-service-image: building $IMAGE on $BASE" >&2
DOCKER_BUILDKIT=0 docker build --quiet --network host --build-arg "BASE=$BASE" \
    --label "org.lagtrace.build=offline" -t "$IMAGE" -t "$NAME:latest" . >&2
echo "$IMAGE"
