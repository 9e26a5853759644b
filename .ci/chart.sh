#!/bin/sh
# The chart's gate: `helm lint --strict` and `helm template` for the default
# values and each file under charts/lagtrace/ci/, every rendered manifest validated
# offline against the Kubernetes schemas (strict: unknown fields are errors) for the
# oldest supported Kubernetes and a recent one. KEDA's CRDs have no schema there; the
# tests check them against KEDA's fields.
set -eu
cd "$(dirname "$0")/.."
HELM=${LAGTRACE_HELM:-$(.ci/provision-chart.sh helm)}
VALIDATE=.venv/bin/kubernetes-validate
CHART=charts/lagtrace
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT INT TERM

for values in "" $CHART/ci/*.yaml; do
    name=$(basename "${values:-default}" .yaml)
    "$HELM" lint --strict "$CHART" ${values:+-f "$values"} >"$out/lint.txt" 2>&1 || { cat "$out/lint.txt" >&2; exit 1; }
    "$HELM" template ci "$CHART" --namespace ci ${values:+-f "$values"} >"$out/$name.yaml"
    for kube in 1.29.0 1.33.0; do
        # --quiet prints failures only; KEDA kinds are reported as missing schemas (a warning).
        "$VALIDATE" --strict --quiet --no-warn -k "$kube" "$out/$name.yaml"
    done
    echo "chart: $name: lint, template and schema validation passed ($(grep -c '^kind:' "$out/$name.yaml") manifests)" >&2
done
