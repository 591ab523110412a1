#!/usr/bin/env bash
# The one build of the project's shipped static binaries: the sprig image's
# buzz-acp and runtime-agent (scripts/image-build.sh, and the registry
# Containerfile's build stage) and the released provider
# (scripts/release-build.sh).
#
#   scripts/static-build.sh PACKAGE...
#
# builds the packages' binaries and prints, as the last line of stdout, the
# directory that holds them; progress goes to stderr.
#
# Every caller builds the same way (issue 30 item 7: one cold suite run built
# the image's binaries three times, 343 + 173 + 180 s, because the callers
# differed in profile and environment):
#   - one profile, `dist` (the workspace Cargo.toml: release with fat LTO and
#     one codegen unit, 3.5 MiB off the image), so the README's `--release`
#     stays cargo's quick default. BUZZ_STATIC_PROFILE names another: the
#     suite (scripts/test.sh) sets `suite`, the dev profile's code in a
#     directory of its own (issue 47: the same static glibc binaries; the
#     suite's cold image job fell from 503 to 213 CPU s; what ships stays
#     `dist`);
#   - one target, the host's triple named explicitly (build scripts and
#     proc-macros stay dynamic; the shipped binaries link glibc statically);
#   - one RUSTFLAGS, `-C target-feature=+crt-static`;
#   - one target dir, CARGO_TARGET_DIR (default ./target).
# A second build of the same package in a run is then cargo's no-op, and the
# dependencies the provider shares with buzz-acp build once.
#
# The variables cargo sets for a crate it runs (CARGO_MANIFEST_DIR,
# CARGO_PKG_NAME, ... in every test process) are dropped first. A test that
# runs image-build.sh or release-build.sh passes them on otherwise; ring's
# build script tracks them (rerun-if-env-changed), so ring and everything
# above it rebuilt, with fat LTO, each time a build ran under `cargo test`
# after one outside it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
die() { printf 'static-build: %s\n' "$*" >&2; exit 1; }
[[ $# -gt 0 ]] || die "usage: scripts/static-build.sh PACKAGE..."

while IFS= read -r var; do
  case $var in
    CARGO_MANIFEST_*|CARGO_PKG_*|CARGO_CRATE_NAME|CARGO_BIN_NAME|CARGO_BIN_EXE_*|CARGO_PRIMARY_PACKAGE|\
    CARGO_TARGET_TMPDIR|CARGO_RUSTC_CURRENT_DIR|CARGO_CFG_*|CARGO_FEATURE_*|CARGO_ENCODED_RUSTFLAGS|OUT_DIR)
      unset "$var" ;;
  esac
done < <(compgen -e)

profile="${BUZZ_STATIC_PROFILE:-dist}"
[[ $profile =~ ^[a-z][a-z0-9-]*$ ]] || die "BUZZ_STATIC_PROFILE: not a profile name: '$profile'"
target="$(rustc -vV | sed -n 's/^host: //p')"
[[ -n $target ]] || die "cannot read the host triple from rustc -vV"
pkgs=()
for p in "$@"; do pkgs+=(-p "$p"); done

# What a build of these very sources made before, in any checkout (a fresh
# clone after the suite, say): reused, no cargo run. Keyed by
# scripts/source-key.sh with the profile, the target, the packages and the
# one variable a build bakes in; each package's binary (named as the
# package) is kept. The newest six builds stay.
memo_root="${BUZZ_STATIC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/buzz-static}"
key="$("$root/scripts/source-key.sh" static-build "$profile" "$target" "$@" \
  "BUZZ_K8S_DEFAULT_IMAGE=${BUZZ_K8S_DEFAULT_IMAGE:-}")"
memo="$memo_root/$profile-$key"
have=1
for p in "$@"; do [[ -x $memo/$p ]] || have=0; done
if (( have )); then
  printf 'static-build: %s: built from these sources before, reused from %s\n' "$*" "$memo" >&2
  touch "$memo"
  echo "$memo"
  exit 0
fi

printf 'static-build: %s (%s, profile %s, +crt-static)\n' "$*" "$target" "$profile" >&2
RUSTFLAGS='-C target-feature=+crt-static' \
  cargo build --quiet --locked --profile "$profile" --target "$target" "${pkgs[@]}" >&2
out="${CARGO_TARGET_DIR:-$root/target}/$target/$profile"
mkdir -p "$memo_root"
tmp="$(mktemp -d "$memo_root/.new.XXXXXX")"
for p in "$@"; do
  [[ -x $out/$p ]] || die "cargo built no binary named $p in $out"
  cp "$out/$p" "$tmp/$p"
done
# Whole or absent; a build of the same key that landed first stays.
mv -T "$tmp" "$memo" 2>/dev/null || rm -rf "$tmp"
# shellcheck disable=SC2012 # names are ours: <profile>-<hex key>
ls -1dt "$memo_root"/*-* 2>/dev/null | tail -n +7 | xargs -r rm -rf
echo "$memo"
