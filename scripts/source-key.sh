#!/usr/bin/env bash
# Prints the key of what a build of this checkout reads: the content of every
# file git would commit (tracked, and untracked but not ignored) but the
# guides (*.md), the toolchain's versions, the cargo settings of the
# environment (CARGO_PROFILE_*, CARGO_BUILD_*, RUSTFLAGS and the like), and
# the words given (a profile, the packages, a baked variable).
#
#   scripts/source-key.sh [WORD...]
#
# Two checkouts of the same sources get the same key (a file's path is read
# relative to the checkout), so what one built another may reuse: the
# suite's static binaries and local-cluster binary serve a fresh clone's
# `scripts/local-cluster.sh up` (issue 47 item 3). A checkout that is not a
# git work tree is read whole (target/ and .git/ left out). About 0.3 s.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
{
  printf '%s\n' "v1" "$@"
  rustc -vV
  cargo -V
  env | grep -E '^(CARGO_PROFILE_|CARGO_BUILD_|CARGO_ENCODED_RUSTFLAGS=|RUSTFLAGS=|RUSTC=|RUSTC_WRAPPER=)' | sort || true
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard --deduplicate
  else
    find . \( -path ./target -o -path ./.git \) -prune -o -type f -printf '%P\0'
  fi | grep -zv '\.md$' | sort -z | while IFS= read -r -d '' f; do
    # A tracked file deleted in the work tree is not read.
    if [[ -f $f ]]; then printf '%s\0' "$f"; fi
  done | xargs -0 -r sha256sum --
} | sha256sum | cut -c1-32
