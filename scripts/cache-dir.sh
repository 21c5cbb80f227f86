# Sourced by the install scripts. `cache_dir NAME` prints where the clone keeps its git-ignored cache
# NAME: .cache/NAME of this checkout, or of the main checkout in a `git worktree` (so worktrees share one
# build). Run from the repository root.
cache_dir() {
  local common
  common=$(git rev-parse --path-format=absolute --git-common-dir 2>/dev/null || true)
  if [ -n "$common" ] && [ "$(basename "$common")" = ".git" ]; then
    echo "$(dirname "$common")/.cache/$1"
  else
    echo "$PWD/.cache/$1"
  fi
}
