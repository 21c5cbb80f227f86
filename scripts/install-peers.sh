#!/usr/bin/env bash
# Installs the routing benchmark's optional peers from PyPI into the git-ignored .venv-peers:
# the reference router (vllm-router) and the SGLang gateway (smg), pinned. Called by
# `npm run bench -- routing` (bench/peers.ts); never in CI. Each package is installed on its own, so
# one that cannot be installed does not block the other; exits non-zero if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -n "${CI:-}" ]; then
  echo "CI: benchmark peers are not installed" >&2
  exit 3
fi
VLLM_ROUTER_VERSION="${VLLM_ROUTER_VERSION:-0.1.17}"
SMG_VERSION="${SMG_VERSION:-1.13.0}"
if [ ! -x .venv-peers/bin/pip ]; then
  python3 -m venv .venv-peers >&2 || { echo "python3 -m venv failed" >&2; exit 1; }
fi
status=0
for pkg in "vllm-router==${VLLM_ROUTER_VERSION}" "smg==${SMG_VERSION}"; do
  .venv-peers/bin/pip install --quiet --disable-pip-version-check "$pkg" >&2 || {
    echo "could not install $pkg" >&2
    status=1
  }
done
exit $status
