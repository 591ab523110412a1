#!/usr/bin/env bash
# Installs the pinned production relay the suite also runs against (issue
# 35): nostr-rs-relay from the Rust package registry, into a cache directory
# keyed by its version, and prints the binary's path on stdout. A warm cache
# is a no-op.
#
# nostr-rs-relay's build compiles a gRPC client with protoc (Debian's
# protobuf-compiler), installed here when run as root and missing. The build
# resolves its dependencies afresh (no --locked): the crate's own lock file
# predates this toolchain, and semver-compatible releases build on it.
#
#   scripts/relay-build.sh           the release build (what the benches measure)
#   scripts/relay-build.sh --debug   cargo's dev profile: the suite's (scripts/test.sh;
#                                    issue 47: the same relay, its protocol and its
#                                    store, for about half the CPU of a cold release build)
#
#   BUZZ_RELAYS_CACHE   cache root (default: ${XDG_CACHE_HOME:-~/.cache}/buzz-relays)
#
# Only the last line of stdout is the path; progress goes to stderr.
set -euo pipefail

version="0.8.12"
profile=release install_flags=()
case "${1:-}" in
  '') ;;
  --debug) profile=debug install_flags=(--debug) ;;
  *) echo "usage: scripts/relay-build.sh [--debug]" >&2; exit 2 ;;
esac
root="${BUZZ_RELAYS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/buzz-relays}"
# The release build keeps the directory it always had (the tests' and the
# benches' default); the debug build has its own.
out="$root/nostr-rs-relay-$version${install_flags[*]:+-$profile}"
bin="$out/bin/nostr-rs-relay"
if [[ -x "$bin" ]]; then
  echo "relay-build: cached nostr-rs-relay $version at $bin" >&2
  echo "$bin"
  exit 0
fi

if ! command -v protoc >/dev/null 2>&1; then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "relay-build: installing protobuf-compiler (nostr-rs-relay's build runs protoc)" >&2
    export DEBIAN_FRONTEND=noninteractive
    (apt-get install -y protobuf-compiler || (apt-get update && apt-get install -y protobuf-compiler)) >&2
  else
    echo "relay-build: protoc is required to build nostr-rs-relay. fix: sudo apt-get update && sudo apt-get install -y protobuf-compiler" >&2
    exit 1
  fi
fi

mkdir -p "$root"
tmp="$(mktemp -d "$root/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
echo "relay-build: building nostr-rs-relay $version, $profile (a cold build takes minutes)" >&2
# Its own target dir (kept beside the cache, one per profile, so a failed
# build resumes), and no LTO: a test relay, built once per version. Its own
# cargo home too: a build run at a low priority (scripts/test.sh) must never
# hold the package cache lock of the user's cargo home while the workspace's
# builds wait on it.
work="$root/work-$profile"
# (Not the suite's lint wrapper: this is another project's crate.)
env -u RUSTC_WORKSPACE_WRAPPER \
  CARGO_HOME="$work/cargo-home" CARGO_TARGET_DIR="$work/target" CARGO_PROFILE_RELEASE_LTO=false \
  cargo install --quiet ${install_flags[@]+"${install_flags[@]}"} --version "$version" --root "$tmp/root" nostr-rs-relay >&2
mkdir -p "$out/bin"
mv "$tmp/root/bin/nostr-rs-relay" "$bin"
rm -rf "$work"
echo "relay-build: nostr-rs-relay $version built in $(( $(date +%s) - start )) s: $bin" >&2
echo "$bin"
