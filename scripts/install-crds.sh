#!/usr/bin/env bash
# Fetches the CustomResourceDefinitions that the manifests under deploy/kubernetes/ use, so that
# test/integration/kube/deploy-manifests.test.ts can hand every manifest to a real kube-apiserver that
# knows those kinds and let it validate them (server-side dry run, strict field validation):
#   - Gateway API (HTTPRoute)                       sigs.k8s.io/gateway-api
#   - Gateway API Inference Extension (InferencePool v1 and v1alpha2, InferenceObjective) sigs.k8s.io/gateway-api-inference-extension
#   - Envoy Gateway (EnvoyExtensionPolicy, EnvoyPatchPolicy, ClientTrafficPolicy) github.com/envoyproxy/gateway
#   - Istio (EnvoyFilter, DestinationRule, VirtualService) istio.io/api
#   - Prometheus Operator (PodMonitor)              github.com/prometheus-operator/prometheus-operator
# Each is the project's own published CRD file, taken from its Go module through the Go module proxy (the
# only route to them here: no download site is reachable). Everything lives in the git-ignored
# .cache/crds/ (the main checkout's in a `git worktree`), so a re-run with the files present does nothing.
# Override a version with the variable named below; the files land in .cache/crds/<stamp>/.
# Prints the CRD directory on stdout; progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
GATEWAY_API_VERSION="${GATEWAY_API_VERSION:-v1.4.1}"
INFERENCE_EXTENSION_VERSION="${INFERENCE_EXTENSION_VERSION:-v1.0.1}"
ENVOY_GATEWAY_VERSION="${ENVOY_GATEWAY_VERSION:-v1.9.1}"
ISTIO_API_VERSION="${ISTIO_API_VERSION:-v1.28.0}"
PROMETHEUS_OPERATOR_VERSION="${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}"

# shellcheck source=cache-dir.sh
. scripts/cache-dir.sh
root=$(cache_dir crds)
# FILES names the set of files taken below: bump it when that set changes, so a cache made before is redone.
FILES=4
stamp="files$FILES.gwapi-$GATEWAY_API_VERSION.gie-$INFERENCE_EXTENSION_VERSION.eg-$ENVOY_GATEWAY_VERSION.istio-$ISTIO_API_VERSION.promop-$PROMETHEUS_OPERATOR_VERSION"
out="$root/$stamp"
if [ -f "$out/.complete" ]; then
  echo "$out"
  exit 0
fi
command -v go >/dev/null 2>&1 || { echo "go is required to fetch the CRDs from the Go module proxy (https://go.dev/dl/)" >&2; exit 1; }
export GOMODCACHE="$root/gomod" GOFLAGS="-modcacherw" GOTOOLCHAIN=local
scratch="$root/scratch"
rm -rf "$scratch" "$out" && mkdir -p "$scratch" "$out"

# module@version -> its directory in the module cache.
fetch() {
  local dir
  dir=$(cd "$scratch" && go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
  [ -d "$dir" ] || { echo "could not download $1 from the Go module proxy" >&2; exit 1; }
  echo "$dir"
}
# Copies one CRD file; a path missing from the module is an error (the layout moved: pin another version).
take() {
  [ -f "$1/$2" ] || { echo "$2 not found in $1" >&2; exit 1; }
  cp "$1/$2" "$out/$3" && chmod u+w "$out/$3"
}

echo "== CRDs: Gateway API $GATEWAY_API_VERSION" >&2
d=$(fetch "sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION")
take "$d" config/crd/standard/gateway.networking.k8s.io_httproutes.yaml gateway-api-httproutes.yaml
echo "== CRDs: Gateway API Inference Extension $INFERENCE_EXTENSION_VERSION" >&2
d=$(fetch "sigs.k8s.io/gateway-api-inference-extension@$INFERENCE_EXTENSION_VERSION")
take "$d" config/crd/bases/inference.networking.k8s.io_inferencepools.yaml inference-pools.yaml
# The v1alpha2 InferencePool of GAIE before v1.0 (--inference-pool-group inference.networking.x-k8s.io).
take "$d" config/crd/bases/inference.networking.x-k8s.io_inferencepools.yaml inference-pools-v1alpha2.yaml
take "$d" config/crd/bases/inference.networking.x-k8s.io_inferenceobjectives.yaml inference-objectives.yaml
echo "== CRDs: Envoy Gateway $ENVOY_GATEWAY_VERSION" >&2
d=$(fetch "github.com/envoyproxy/gateway@$ENVOY_GATEWAY_VERSION")
take "$d" charts/gateway-helm/charts/crds/crds/generated/gateway.envoyproxy.io_envoyextensionpolicies.yaml envoy-gateway-envoyextensionpolicies.yaml
take "$d" charts/gateway-helm/charts/crds/crds/generated/gateway.envoyproxy.io_envoypatchpolicies.yaml envoy-gateway-envoypatchpolicies.yaml
take "$d" charts/gateway-helm/charts/crds/crds/generated/gateway.envoyproxy.io_clienttrafficpolicies.yaml envoy-gateway-clienttrafficpolicies.yaml
echo "== CRDs: Istio API $ISTIO_API_VERSION" >&2
d=$(fetch "istio.io/api@$ISTIO_API_VERSION")
take "$d" kubernetes/customresourcedefinitions.gen.yaml istio.yaml
echo "== CRDs: Prometheus Operator $PROMETHEUS_OPERATOR_VERSION" >&2
d=$(fetch "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION")
take "$d" example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml prometheus-operator-podmonitors.yaml

rm -rf "$scratch" "$GOMODCACHE" # the CRD files are all that is kept
touch "$out/.complete"
echo "$out"
