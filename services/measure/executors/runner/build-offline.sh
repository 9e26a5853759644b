#!/bin/sh
# Build the lagtrace runner image without a container registry (DESIGN.md section 4, 8):
# debootstrap Debian bookworm from the host's apt mirror, install packages.txt in a
# chroot, add the non-root user and `docker import` the tree.
#
# Cached by tag: the tag is a hash of this script and packages.txt, so an unchanged
# recipe is never rebuilt; the image is also tagged NAME:latest, lagtrace's default.
#
#   services/measure/executors/runner/build-offline.sh [NAME]     (default NAME: lagtrace-runner)
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
NAME=${1:-lagtrace-runner}
TAG=$(cat "$HERE/build-offline.sh" "$HERE/packages.txt" | sha256sum | cut -c1-12)
IMAGE="$NAME:$TAG"

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "build-offline: $IMAGE exists, nothing to build" >&2
    docker tag "$IMAGE" "$NAME:latest"
    exit 0
fi

# The first Debian mirror the host's apt uses (one-line or deb822 sources).
mirror_of() {  # $1: path suffix, e.g. /debian or /debian-security
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
        | grep -v '^[[:space:]]*#' | grep -o "https\?://[^[:space:]]*$1/\?\([[:space:]]\|\$\)" \
        | head -n 1 | tr -d '[:space:]' | sed 's:/$::'
}
MIRROR=$(mirror_of /debian)
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SECURITY=$(mirror_of /debian-security)

if ! command -v debootstrap >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

ROOT=$(mktemp -d /var/tmp/lagtrace-runner.XXXXXX)
cleanup() {
    for fs in proc sys dev/pts dev; do umount "$ROOT/$fs" 2>/dev/null || true; done
    rm -rf "$ROOT"
}
trap cleanup EXIT INT TERM

echo "build-offline: debootstrap bookworm from $MIRROR into $ROOT" >&2
debootstrap --variant=minbase bookworm "$ROOT" "$MIRROR" >"$ROOT.log" 2>&1 || {
    tail -n 30 "$ROOT.log" >&2; rm -f "$ROOT.log"; exit 1; }
rm -f "$ROOT.log"

{
    echo "deb $MIRROR bookworm main"
    echo "deb $MIRROR bookworm-updates main"
    [ -n "$SECURITY" ] && echo "deb $SECURITY bookworm-security main"
} >"$ROOT/etc/apt/sources.list"
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
mount -t proc proc "$ROOT/proc"

PACKAGES=$(grep -v '^[[:space:]]*#' "$HERE/packages.txt" | tr '\n' ' ')
echo "build-offline: installing $PACKAGES" >&2
chroot "$ROOT" sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends $PACKAGES >/dev/null"
# Same user and directories as the Dockerfile: runs are made as uid 1000.
chroot "$ROOT" sh -c 'useradd --uid 1000 --create-home --shell /bin/bash runner \
    && mkdir -p /lagtrace/deps /work && chown runner:runner /lagtrace/deps'
chroot "$ROOT" sh -c 'apt-get clean && rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/* /usr/share/locale/*'
umount "$ROOT/proc"
# The engine provides resolv.conf, hosts and hostname per container.
: >"$ROOT/etc/resolv.conf"

echo "build-offline: importing $IMAGE" >&2
tar -C "$ROOT" --numeric-owner -c . | docker import \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PYTHONUNBUFFERED=1' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'USER 1000:1000' \
    --change 'WORKDIR /work' \
    --change 'LABEL org.lagtrace.runner=offline' \
    - "$IMAGE" >/dev/null
docker tag "$IMAGE" "$NAME:latest"
echo "build-offline: built $IMAGE (also $NAME:latest)" >&2
