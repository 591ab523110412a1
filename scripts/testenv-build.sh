#!/usr/bin/env bash
# Builds the pinned upstream kube-apiserver and etcd used by the conformance
# test environment (conformance/kube-testenv), into a cache directory keyed by
# their versions, and prints that directory on stdout. A warm cache is a no-op.
#
#   BUZZ_TESTENV_CACHE   cache root (default: ${XDG_CACHE_HOME:-~/.cache}/buzz-testenv)
#
# Only the last line of stdout is the directory; progress goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mod="$here/conformance/kube-testenv"

k8s_version="$(awk '$1=="k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$mod/go.mod")"
etcd_version="$(awk '$1=="go.etcd.io/etcd/server/v3" && $2 ~ /^v/ {print $2; exit}' "$mod/go.mod")"
if [[ -z "$k8s_version" || -z "$etcd_version" ]]; then
  echo "testenv-build: could not read pinned versions from $mod/go.mod" >&2
  exit 1
fi

root="${BUZZ_TESTENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/buzz-testenv}"
out="$root/${k8s_version}-${etcd_version}"

if [[ -x "$out/kube-apiserver" && -x "$out/etcd" ]]; then
  echo "testenv-build: cached binaries in $out" >&2
  echo "$out"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "testenv-build: Go is required to build the test cluster binaries." >&2
  echo "  fix: apt-get update && apt-get install -y golang-go   (Go >= $(awk '$1=="go"{print $2}' "$mod/go.mod"))" >&2
  exit 1
fi

mkdir -p "$out"
tmp="$(mktemp -d "$out/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

start=$(date +%s)
echo "testenv-build: building kube-apiserver $k8s_version and etcd $etcd_version (cold builds take minutes)" >&2
(
  cd "$mod"
  export CGO_ENABLED=0
  go build -trimpath -o "$tmp/etcd" go.etcd.io/etcd/server/v3
  go build -trimpath -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
)
mv "$tmp/etcd" "$out/etcd"
mv "$tmp/kube-apiserver" "$out/kube-apiserver"
echo "testenv-build: built in $(( $(date +%s) - start )) s into $out" >&2
echo "$out"
