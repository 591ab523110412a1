#!/usr/bin/env bash
# Builds the pinned upstream binaries of the conformance test environment
# into a cache directory keyed by their versions, and prints that directory
# on stdout. A warm cache is a no-op.
#
#   control plane: kube-apiserver and etcd (conformance/kube-testenv)
#   real node:     kubelet, kube-scheduler, kube-controller-manager (the same
#                  pinned k8s.io/kubernetes module), containerd with its runc
#                  shim and ctr (Go modules, version below), a pause image
#                  built from conformance/images/pause/pause.c, and the node's
#                  storage: rancher's local-path-provisioner (its Go module,
#                  version below) and its helper image, built from
#                  conformance/images/volume-helper/helper.c
#   network policy: kube-router's firewall (its Go module, version below),
#                  the enforcer the real node and scripts/local-cluster.sh
#                  run beside the kubelet (issue 53)
#
# Every Kubernetes binary is stamped with its version (component-base ldflags),
# so the apiserver and the node report e.g. v1.36.3, not v0.0.0-master.
#
#   BUZZ_TESTENV_CACHE   cache root (default: ${XDG_CACHE_HOME:-~/.cache}/buzz-testenv)
#
# Only the last line of stdout is the directory; progress goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mod="$here/conformance/kube-testenv"
# containerd 2.3.x from Go modules (measured: ../shared/kubelet.md).
containerd_version="v2.3.4"
# The real node's dynamic provisioner (issue 32 item 3), as kind and k3s ship it.
local_path_version="v0.0.30"
# The NetworkPolicy enforcer (issue 53; ../shared/egress.md): kube-router's
# firewall alone, as k3s embeds it, pinned (with why) in its own module.
kr_mod="$here/conformance/kube-router"
kube_router_version="$(awk '$1=="github.com/cloudnativelabs/kube-router/v2" && $2 ~ /^v/ {print $2; exit} $1=="require" && $2=="github.com/cloudnativelabs/kube-router/v2" {print $3; exit}' "$kr_mod/go.mod")"
[[ -n $kube_router_version ]] || { echo "testenv-build: no kube-router version in $kr_mod/go.mod" >&2; exit 1; }
kube_router_sum="$(cat "$kr_mod/go.mod" "$kr_mod/go.sum" | sha256sum | cut -c1-12)"

k8s_version="$(awk '$1=="k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$mod/go.mod")"
etcd_version="$(awk '$1=="go.etcd.io/etcd/server/v3" && $2 ~ /^v/ {print $2; exit}' "$mod/go.mod")"
if [[ -z "$k8s_version" || -z "$etcd_version" ]]; then
  echo "testenv-build: could not read pinned versions from $mod/go.mod" >&2
  exit 1
fi

root="${BUZZ_TESTENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/buzz-testenv}"
# The key names every pinned input: a change to any of them is a new dir.
pause_src="$here/conformance/images/pause/pause.c"
pause_sum="$(sha256sum "$pause_src" | cut -c1-12)"
out="$root/${k8s_version}-${etcd_version}-containerd${containerd_version}-pause${pause_sum}"
# The storage parts are keyed by their own inputs inside that dir, so a new
# provisioner or helper rebuilds only itself; the node reads the stable names
# linked to them.
helper_src="$here/conformance/images/volume-helper/helper.c"
helper_sum="$(sha256sum "$helper_src" | cut -c1-12)"
local_path_bin="local-path-provisioner-${local_path_version}"
kube_router_bin="kube-router-${kube_router_version}-${kube_router_sum}"
helper_archive="volume-helper-${helper_sum}.oci.tar"

bins=(kube-apiserver etcd kubelet kube-scheduler kube-controller-manager containerd containerd-shim-runc-v2 ctr)
complete=1
for b in "${bins[@]}"; do [[ -x "$out/$b" ]] || complete=0; done
[[ -f "$out/pause.oci.tar" ]] || complete=0
[[ -x "$out/$local_path_bin" && -f "$out/$helper_archive" ]] || complete=0
[[ -x "$out/$kube_router_bin" ]] || complete=0
# The stable names the node reads, pointed at this checkout's keyed builds.
link_storage() {
  ln -sfn "$local_path_bin" "$out/local-path-provisioner"
  ln -sfn "$helper_archive" "$out/volume-helper.oci.tar"
  ln -sfn "$kube_router_bin" "$out/kube-router"
}
if (( complete )); then
  link_storage
  echo "testenv-build: cached binaries in $out" >&2
  echo "$out"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "testenv-build: Go is required to build the test cluster binaries." >&2
  echo "  fix: apt-get update && apt-get install -y golang-go   (Go >= $(awk '$1=="go"{print $2}' "$mod/go.mod"))" >&2
  exit 1
fi
if ! command -v cc >/dev/null 2>&1; then
  echo "testenv-build: a C compiler is required for the pause image. fix: apt-get update && apt-get install -y build-essential" >&2
  exit 1
fi

mkdir -p "$out"
tmp="$(mktemp -d "$out/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

start=$(date +%s)
minor="${k8s_version#v1.}"; minor="${minor%%.*}"
ldflags="-X k8s.io/component-base/version.gitVersion=${k8s_version}"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor}"
ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
# No symbol table, no DWARF: test binaries nobody debugs, and the link of
# each (single-threaded in part) is the cold build's tail.
ldflags+=" -s -w"
export CGO_ENABLED=0
# One `go build` for etcd and the four Kubernetes binaries (what is missing of
# them): the packages they share compile once, and the go command keeps both
# cores busy through each binary's link. containerd is another module at
# another version (`go install pkg@version`), built beside it. Measured cold
# on 2 cores with the builds one after another: 977 s (issue 30 item 7).
declare -A go_pkgs=(
  [etcd]=go.etcd.io/etcd/server/v3
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kubelet]=k8s.io/kubernetes/cmd/kubelet
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
)
# `go build -o DIR/` names a binary by its package path's last element, the
# one before a /vN suffix: etcd's comes out as `server`.
declare -A go_names=([etcd]=server)
want=()
for b in etcd kube-apiserver kubelet kube-scheduler kube-controller-manager; do
  [[ -x "$out/$b" ]] || want+=("$b")
done
containerd_pid=""
if [[ ! -x "$out/containerd" || ! -x "$out/containerd-shim-runc-v2" || ! -x "$out/ctr" ]]; then
  echo "testenv-build: building containerd $containerd_version, its runc shim and ctr (beside the rest)" >&2
  mkdir -p "$tmp/containerd"
  (
    GOBIN="$tmp/containerd" go install -trimpath -ldflags "-s -w" \
      "github.com/containerd/containerd/v2/cmd/containerd@$containerd_version" \
      "github.com/containerd/containerd/v2/cmd/ctr@$containerd_version"
    GOBIN="$tmp/containerd" go install -trimpath -ldflags "-s -w" -tags no_grpc \
      "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$containerd_version"
  ) &
  containerd_pid=$!
fi
if (( ${#want[@]} )); then
  echo "testenv-build: building ${want[*]} (etcd $etcd_version, Kubernetes $k8s_version; cold builds take minutes)" >&2
  pkgs=()
  for b in "${want[@]}"; do pkgs+=("${go_pkgs[$b]}"); done
  mkdir -p "$tmp/go"
  # The version ldflags name k8s.io/component-base, which etcd does not link:
  # the linker ignores them there.
  (cd "$mod" && go build -trimpath -ldflags "$ldflags" -o "$tmp/go/" "${pkgs[@]}")
  for b in "${want[@]}"; do mv "$tmp/go/${go_names[$b]:-$b}" "$out/$b"; done
fi
local_path_pid=""
if [[ ! -x "$out/$local_path_bin" ]]; then
  echo "testenv-build: building local-path-provisioner $local_path_version (beside the rest)" >&2
  mkdir -p "$tmp/local-path"
  GOBIN="$tmp/local-path" go install -trimpath -ldflags "-s -w" \
    "github.com/rancher/local-path-provisioner@$local_path_version" &
  local_path_pid=$!
fi
kube_router_pid=""
if [[ ! -x "$out/$kube_router_bin" ]]; then
  echo "testenv-build: building kube-router $kube_router_version (beside the rest)" >&2
  mkdir -p "$tmp/kube-router"
  (cd "$kr_mod" && go build -trimpath \
    -ldflags "-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$kube_router_version" \
    -o "$tmp/kube-router/kube-router" github.com/cloudnativelabs/kube-router/v2/cmd/kube-router) &
  kube_router_pid=$!
fi
if [[ -n $containerd_pid ]]; then
  wait "$containerd_pid" || { echo "testenv-build: the containerd build failed" >&2; exit 1; }
  for b in containerd containerd-shim-runc-v2 ctr; do mv "$tmp/containerd/$b" "$out/$b"; done
fi

if [[ -n $local_path_pid ]]; then
  wait "$local_path_pid" || { echo "testenv-build: the local-path-provisioner build failed" >&2; exit 1; }
  mv "$tmp/local-path/local-path-provisioner" "$out/$local_path_bin"
fi

if [[ -n $kube_router_pid ]]; then
  wait "$kube_router_pid" || { echo "testenv-build: the kube-router build failed" >&2; exit 1; }
  mv "$tmp/kube-router/kube-router" "$out/$kube_router_bin"
fi

if [[ ! -f "$out/pause.oci.tar" ]]; then
  echo "testenv-build: building the pause image" >&2
  "$here/scripts/static-image.sh" "$pause_src" "$tmp/pause.oci.tar" pause 65535:65535
  mv "$tmp/pause.oci.tar" "$out/pause.oci.tar"
fi
if [[ ! -f "$out/$helper_archive" ]]; then
  echo "testenv-build: building the volume helper image" >&2
  # Root in its helper pod: it makes and removes directories the node owns.
  "$here/scripts/static-image.sh" "$helper_src" "$tmp/$helper_archive" helper 0:0
  mv "$tmp/$helper_archive" "$out/$helper_archive"
fi
link_storage
echo "testenv-build: built in $(( $(date +%s) - start )) s into $out" >&2
echo "$out"
