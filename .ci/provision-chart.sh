#!/bin/sh
# The chart's tooling, which only the chart's and the service image's tests use (the
# service quickstart and the rest of the suite need neither; .ci/provision.sh makes theirs):
#   helm    a Helm binary of the pinned version, built from source once per machine (.ci/helm.sh; needs Go)
#   image   the service image from the top-level Dockerfile, built offline (.ci/build-service-image.sh)
# Prints the binary's path or the image reference on stdout; both are cached, so a second
# call costs a second. Run by .ci/chart.sh, and by tests/chart/ and tests/image/ when
# LAGTRACE_HELM / LAGTRACE_TEST_SERVICE_IMAGE are not set (tests/conftest.py provisioned()).
#
#   .ci/provision-chart.sh helm|image
set -eu
cd "$(dirname "$0")/.."
# Test processes running side by side (pytest-xdist) ask at once: one builds, the others
# wait for it and then find the cached result. One lock per tool: the chart tests need not
# wait minutes for the image build.
exec 9>"${TMPDIR:-/tmp}/lagtrace-provision-chart-${1:-}-$(id -u).lock"
flock 9
case "${1:-}" in
    helm) .ci/helm.sh ;;
    # A debootstrapped base, then docker build: minutes the first time, then cached by a
    # hash of the build context (a source edit rebuilds only the last layers).
    image) .ci/build-service-image.sh ;;
    *) echo "usage: .ci/provision-chart.sh helm|image" >&2; exit 2 ;;
esac
