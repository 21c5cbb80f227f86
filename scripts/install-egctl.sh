#!/usr/bin/env bash
# Builds Envoy Gateway's own CLI, egctl, whose `egctl x translate` runs Envoy Gateway's translator
# offline: Gateway API resources and Envoy Gateway policies in, the xDS Envoy Gateway would send out.
# test/e2e/envoy-gateway.test.ts translates deploy/kubernetes/envoy-gateway.yaml with it and runs the
# result with the real Envoy, the router and simulated workers: the manifests are checked by the
# translator that will read them, not by a reading of its source.
# Built from the github.com/envoyproxy/gateway Go module (the Go module proxy; no download site is
# reachable here), ~5 min on 2 idle cores. Everything lives in the git-ignored .cache/egctl/ (the main
# checkout's in a `git worktree`); only the binary is kept, so a re-run with it present does nothing.
# EGCTL_BIN points at an existing egctl instead (no build). Prints the binary's path on stdout.
# --check: print the path if egctl is there, fail if it is not (never build; what tests call).
set -euo pipefail
cd "$(dirname "$0")/.."
ENVOY_GATEWAY_VERSION="${ENVOY_GATEWAY_VERSION:-v1.9.1}"
if [ -n "${EGCTL_BIN:-}" ]; then
  [ -x "$EGCTL_BIN" ] || { echo "EGCTL_BIN=$EGCTL_BIN is not executable" >&2; exit 1; }
  echo "$EGCTL_BIN"
  exit 0
fi
# shellcheck source=cache-dir.sh
. scripts/cache-dir.sh
root=$(cache_dir egctl)
bin="$root/bin/egctl"
stamp="$root/bin/egctl.version"
if [ -x "$bin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$ENVOY_GATEWAY_VERSION" ]; then
  echo "$bin"
  exit 0
fi
if [ "${1:-}" = "--check" ]; then
  echo "egctl $ENVOY_GATEWAY_VERSION is not built at $bin" >&2
  exit 1
fi
command -v go >/dev/null 2>&1 || { echo "go is required to build egctl (https://go.dev/dl/)" >&2; exit 1; }
export GOMODCACHE="$root/gomod" GOCACHE="$root/gobuild" GOFLAGS="-modcacherw" GOTOOLCHAIN=local GOBIN="$root/bin"
mkdir -p "$root/bin"
started=$(date +%s)
echo "== egctl $ENVOY_GATEWAY_VERSION: building (several minutes)" >&2
# Outside any module: `go install pkg@version` builds that module's own requirements.
(cd "$root" && go install "github.com/envoyproxy/gateway/cmd/egctl@$ENVOY_GATEWAY_VERSION")
echo "$ENVOY_GATEWAY_VERSION" >"$stamp"
rm -rf "$GOMODCACHE" "$GOCACHE" # ~3.5 GB of sources and objects: only the binary is needed
echo "== egctl built in $(($(date +%s) - started)) s" >&2
echo "$bin"
