#!/usr/bin/env bash
# Runs every cargo-fuzz target of the repository.
#
#   scripts/fuzz.sh [SECONDS]      each target for SECONDS (default 600)
#   scripts/fuzz.sh --smoke        each target for a few seconds (scripts/test.sh)
#
# A fuzz project is any `<crate>/fuzz/` (or `images/<crate>/fuzz/`) directory
# with a Cargo.toml; its targets are `fuzz_targets/*.rs` and each target's
# committed corpus is `fuzz/corpus/<target>/`. New finds land in a scratch
# corpus outside the repo, so a run never dirties the checkout; crashes are
# written to `fuzz/artifacts/<target>/` and fail the script.
#
# Needs the nightly toolchain and cargo-fuzz. cargo-fuzz is pinned (below)
# and installed once with `cargo install --locked` into a cache of its own,
# keyed by the pin (BUZZ_FUZZ_TOOLS, default
# ${XDG_CACHE_HOME:-~/.cache}/buzz-cargo-fuzz-<version>), unless the one on
# PATH is that version already. Each fuzz project builds all its targets in
# one `cargo fuzz build`, into one nightly target dir outside the repo shared
# by every project (BUZZ_FUZZ_TARGET_DIR, default
# ${XDG_CACHE_HOME:-~/.cache}/buzz-fuzz-target); each target's run then finds
# its binary built.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
say() { printf '== %s\n' "$*" >&2; }
die() { printf 'fuzz.sh: %s\n' "$*" >&2; exit 1; }

seconds=600
# The smoke builds in cargo-fuzz's dev profile (no optimisation, many codegen
# units; ASan and coverage instrumentation as always): a few seconds per
# target need no speed, and a cold release build of every fuzz project is
# the largest part of a fresh machine's first suite run. Long runs keep the
# optimised build.
profile=(--release)
case "${1:-}" in
  --smoke) seconds="${BUZZ_FUZZ_SMOKE_SECS:-4}"; profile=(--dev) ;;
  '') ;;
  *[!0-9]*) die "usage: scripts/fuzz.sh [SECONDS|--smoke]" ;;
  *) seconds="$1" ;;
esac

rustup toolchain list 2>/dev/null | grep -q '^nightly' ||
  die "the nightly toolchain is missing. fix: rustup toolchain install nightly --profile minimal"
cargo_fuzz_version=0.13.2
tools="${BUZZ_FUZZ_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/buzz-cargo-fuzz-$cargo_fuzz_version}"
export PATH="$tools/bin:$PATH"
if [[ "$(cargo-fuzz --version 2>/dev/null)" != "cargo-fuzz $cargo_fuzz_version" ]]; then
  say "installing cargo-fuzz $cargo_fuzz_version into $tools"
  # Its own temporary target dir: not the workspace's, not the fuzz projects'.
  env -u CARGO_TARGET_DIR cargo install --quiet --locked --root "$tools" --version "$cargo_fuzz_version" cargo-fuzz
  [[ "$(cargo-fuzz --version 2>/dev/null)" == "cargo-fuzz $cargo_fuzz_version" ]] ||
    die "cargo-fuzz $cargo_fuzz_version did not install into $tools"
fi

# One target dir for every fuzz project, so shared dependencies build once.
export CARGO_TARGET_DIR="${BUZZ_FUZZ_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/buzz-fuzz-target}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

mapfile -t projects < <(find . -path ./target -prune -o -path '*/fuzz/Cargo.toml' -print | sort | xargs -r -n1 dirname)
[[ ${#projects[@]} -gt 0 ]] || die "no fuzz projects found"

failed=()
for proj in "${projects[@]}"; do
  crate_dir="$(dirname "$proj")"
  say "fuzz build ${crate_dir#./}: every target (${profile[*]})"
  if ! (cd "$crate_dir" && cargo +nightly fuzz build "${profile[@]}" --fuzz-dir fuzz 2>"$scratch/build.log"); then
    tail -n 40 "$scratch/build.log" >&2
    failed+=("${crate_dir#./} (build)")
    continue
  fi
  for src in "$proj"/fuzz_targets/*.rs; do
    target="$(basename "$src" .rs)"
    committed="$proj/corpus/$target"
    mkdir -p "$committed" "$scratch/$target"
    say "fuzz ${crate_dir#./}:$target for ${seconds}s"
    # The scratch corpus comes first, so new inputs land there, not in the repo.
    # The same flags as the build above: cargo finds the binary up to date.
    if ! (cd "$crate_dir" && cargo +nightly fuzz run "${profile[@]}" --fuzz-dir fuzz "$target" \
          "$scratch/$target" "fuzz/corpus/$target" -- \
          -max_total_time="$seconds" -print_final_stats=1 2>"$scratch/$target.log"); then
      tail -n 40 "$scratch/$target.log" >&2
      failed+=("${crate_dir#./}:$target")
    else
      grep -E '^stat::(number_of_executed_units|peak_rss_mb)' "$scratch/$target.log" |
        sed "s|^|  ${target} |" >&2 || true
    fi
  done
done

[[ ${#failed[@]} -eq 0 ]] || die "crashes or build failures in: ${failed[*]}"
say "fuzz: every target ran ${seconds}s without a crash"
