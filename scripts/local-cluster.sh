#!/usr/bin/env bash
# The Kubernetes path on one machine, like `kind` (a developer tool, not
# product code): the pinned kube-apiserver + etcd of the test control plane
# and its container node, which runs the pods of one namespace with podman
# from the sprig image.
#
#   scripts/local-cluster.sh up       build what is missing, start, print the exports
#   scripts/local-cluster.sh down     stop it (its containers are removed)
#   scripts/local-cluster.sh status
#
# State lives in ${BUZZ_LOCAL_CLUSTER_DIR:-~/.cache/buzz-local-cluster}:
# `kubeconfig` (admin), `pid`, `log`. The namespace is `buzz-agents`. Then:
#
#   eval "$(scripts/local-cluster.sh up)"
#   target/release/buzz-launcher demo --kubernetes
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${BUZZ_LOCAL_CLUSTER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/buzz-local-cluster}"
ns="buzz-agents"
say() { printf '== %s\n' "$*" >&2; }
die() { printf 'local-cluster.sh: %s\n' "$*" >&2; exit 1; }

running() { [[ -f "$dir/pid" ]] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; }

exports() {
  printf 'export KUBECONFIG=%q\n' "$dir/kubeconfig"
  printf 'export BUZZ_LOCAL_CLUSTER_NAMESPACE=%q\n' "$ns"
  printf 'export BUZZ_SPRIG_IMAGE=%q\n' "$BUZZ_SPRIG_IMAGE"
}

case "${1:-}" in
  up)
    mkdir -p "$dir"
    say "test control plane binaries"
    BUZZ_TESTENV_BIN_DIR="$("$root/scripts/testenv-build.sh" | tail -n 1)"
    export BUZZ_TESTENV_BIN_DIR
    say "sprig image"
    image_env="$("$root/scripts/image-build.sh" | tail -n 1)"
    set -a
    # shellcheck disable=SC1090
    . "$image_env"
    set +a
    if running; then
      say "already running (pid $(cat "$dir/pid"))"
      exports
      exit 0
    fi
    say "building the local cluster"
    (cd "$root" && cargo build --quiet --release -p buzz-conformance --bin local-cluster)
    bin="${CARGO_TARGET_DIR:-$root/target}/release/local-cluster"
    rm -f "$dir/ready"
    nohup setsid "$bin" "$dir" "$ns" >"$dir/log" 2>&1 &
    echo $! >"$dir/pid"
    for _ in $(seq 1 240); do
      [[ -f "$dir/ready" ]] && break
      running || die "it exited; see $dir/log: $(tail -n 3 "$dir/log")"
      sleep 0.5
    done
    [[ -f "$dir/ready" ]] || die "not ready after 120 s; see $dir/log"
    say "running (pid $(cat "$dir/pid")); namespace $ns; kubeconfig $dir/kubeconfig"
    exports
    ;;
  down)
    if running; then
      pid="$(cat "$dir/pid")"
      kill -TERM "$pid"
      for _ in $(seq 1 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -0 "$pid" 2>/dev/null && die "pid $pid did not stop; see $dir/log"
      say "stopped"
    else
      say "not running"
    fi
    rm -f "$dir/pid" "$dir/ready"
    ;;
  status)
    if running; then echo "running (pid $(cat "$dir/pid")); kubeconfig $dir/kubeconfig"; else echo "not running"; fi
    ;;
  *) die "usage: scripts/local-cluster.sh up|down|status" ;;
esac
