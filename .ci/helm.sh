#!/bin/sh
# Print the path of a Helm binary of the pinned version, building it from source once
# per machine (no release download here: DESIGN.md section 8, the Go module proxy is
# reachable). Cached under $LAGTRACE_CACHE_DIR (default /var/cache/lagtrace) by version,
# so CI pays the ~minutes of compilation only the first time.
#
#   .ci/helm.sh            prints e.g. /var/cache/lagtrace/helm-v3.16.3/helm
set -eu

VERSION=${LAGTRACE_HELM_VERSION:-v3.16.3}
# The Kubernetes version Helm assumes without a cluster (`helm template`, `helm lint`):
# its release build stamps the client-go minor it was built with (v0.31 for 3.16);
# unstamped it would claim 1.20 and refuse charts needing newer APIs.
K8S_MINOR=${LAGTRACE_HELM_K8S_MINOR:-31}
CACHE=${LAGTRACE_CACHE_DIR:-/var/cache/lagtrace}
NAME="helm-$VERSION-k8s1.$K8S_MINOR"
BIN="$CACHE/$NAME/helm"

built() { [ -x "$1" ] && "$1" version --short 2>/dev/null | grep -q "^$VERSION"; }
if built "$BIN"; then
    echo "$BIN"
    exit 0
fi
# An ordinary user cannot write the machine's cache: one of their own, built once.
if [ -z "${LAGTRACE_CACHE_DIR:-}" ] && ! { mkdir -p "$CACHE" 2>/dev/null && [ -w "$CACHE" ]; }; then
    CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/lagtrace"
    BIN="$CACHE/$NAME/helm"
    if built "$BIN"; then
        echo "$BIN"
        exit 0
    fi
fi
DIR="$CACHE/$NAME"

GO=$(command -v go || echo /usr/local/go/bin/go)
if [ ! -x "$GO" ]; then
    echo "helm: go is not installed; cannot build Helm $VERSION from source (Go 1.22 or newer: https://go.dev/doc/install)" >&2
    exit 1
fi

mkdir -p "$DIR"
echo "helm: building Helm $VERSION from source into $DIR (once per machine)" >&2
# The version is stamped the way Helm's Makefile does it, so `helm version` tells the truth.
GOBIN="$DIR" CGO_ENABLED=0 "$GO" install \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$VERSION \
        -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$K8S_MINOR \
        -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$K8S_MINOR" \
    "helm.sh/helm/v3/cmd/helm@$VERSION" >&2
"$BIN" version --short >&2
echo "$BIN"
