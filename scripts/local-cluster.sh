#!/usr/bin/env bash
# A real single-node Kubernetes on this machine, like `kind` (a developer
# tool, not product code; the anchor is Kubernetes' own
# hack/local-up-cluster.sh): the pinned kube-apiserver + etcd, kubelet,
# kube-scheduler and a trimmed kube-controller-manager, containerd 2.3 with
# Debian's runc and CNI plugins, and a local registry on 127.0.0.1 holding
# the sprig image. Pods live on the bridge cni0 (10.213.0.0/24) with no
# route off the machine; they reach the host at 10.213.0.1.
#
#   scripts/local-cluster.sh up       build what is missing, start, print the exports
#   scripts/local-cluster.sh down     delete every pod, stop it, restore the machine
#   scripts/local-cluster.sh status
#   scripts/local-cluster.sh keep BIN keep BIN as the local-cluster binary of these
#                                     sources (scripts/test.sh, after its test build)
#
# What `up` builds, each cached, so that a fresh clone of sources this
# machine has built before (the suite's, say) starts in the time the node
# takes (issue 47 item 3):
#   - the cluster binaries (scripts/testenv-build.sh; Go, cached by version;
#     cold, 17 min on 2 cores beside the suite's other builds);
#   - the sprig image (scripts/image-build.sh), its binaries in the suite's
#     profile, `suite` (static glibc, the dev profile's code; reused for the
#     same sources by scripts/static-build.sh; cold, 3 min of CPU); set
#     BUZZ_STATIC_PROFILE=dist for the shipped build (fat LTO, longer);
#   - the local-cluster binary (buzz-conformance's, debug), kept per source
#     key (scripts/source-key.sh) in the state dir's bin/; cold, minutes: a
#     debug build of the workspace's test crate and its dependencies.
#   `up` says on stderr which of them it builds, before it does.
#
# Runs as root (a bridge, mounts, cgroups, and the three kernel settings the
# kubelet changes at every start). One node per machine: a second `up` while
# one runs says so and changes nothing. What `up` does to this machine, and
# says on stderr before it does it:
#
#   - While the node runs, the kubelet sets kernel.panic_on_oops=1 and
#     kernel.panic=10: any kernel oops (a GPU driver's, say) then reboots
#     the machine 10 s later instead of being logged. It also sets
#     vm.overcommit_memory=1. `down` restores the values recorded before
#     the start; after a crash or a SIGKILL they hold until `down` or the
#     next start sweeps (or a reboot).
#   - Missing Debian packages (runc, containernetworking-plugins, iptables,
#     docker-registry, skopeo, iproute2, and ipset for the NetworkPolicy
#     enforcer, kube-router) are installed with apt-get; the
#     command is printed first. Without apt-get it stops and names them.
#   - Under sudo (SUDO_USER set) with no CARGO_TARGET_DIR, root's cargo builds
#     go to ~root/.cache/buzz-local-cluster/target, not the checkout's target/,
#     so no root-owned file lands in the user's build dir; the cluster binaries
#     and the image are cached in root's cache dirs. The builds run as root:
#     the image build needs root's podman storage.
#
# The node's files (configs, PKI, containerd's images, logs) live in a new
# root-only run dir /run/buzz-real-node/n-<pid>, removed by `down`.
#
# State lives in ${BUZZ_LOCAL_CLUSTER_DIR:-~/.cache/buzz-local-cluster}:
# `kubeconfig` (admin), `env` (the exports), `pid`, `log`. The namespace is
# `buzz-agents` (PodSecurity `restricted` enforced). Then:
#
#   eval "$(scripts/local-cluster.sh up)"
#   kubectl get nodes -o wide
#   target/release/buzz-launcher demo --kubernetes
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${BUZZ_LOCAL_CLUSTER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/buzz-local-cluster}"
ns="buzz-agents"
if [[ -z "${CARGO_TARGET_DIR:-}" && -n "${SUDO_USER:-}" && "${SUDO_USER}" != root && $(id -u) -eq 0 ]]; then
  # Root's builds stay out of the invoking user's checkout (see the header).
  CARGO_TARGET_DIR="$(getent passwd root | cut -d: -f6)/.cache/buzz-local-cluster/target"
  export CARGO_TARGET_DIR
fi
target="${CARGO_TARGET_DIR:-$root/target}"
# The image's binaries: the suite's profile unless told (see the header).
export BUZZ_STATIC_PROFILE="${BUZZ_STATIC_PROFILE:-suite}"
say() { printf '== %s\n' "$*" >&2; }
die() { printf 'local-cluster.sh: %s\n' "$*" >&2; exit 1; }

# The recorded process, only if it is still the one we started: the pid, its
# start time (/proc/PID/stat field 22) and its command must all match, so a
# reused pid (after a reboot, say) is never signalled.
proc_start() { awk '{print $22}' "/proc/$1/stat" 2>/dev/null; }
running_pid() {
  [[ -f "$dir/pid" ]] || return 1
  local pid start
  read -r pid start <"$dir/pid" || return 1
  [[ -n "${pid:-}" && -n "${start:-}" && "$(proc_start "$pid")" == "$start" ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "local-cluster $dir " || return 1
  echo "$pid"
}

# The local-cluster binary of these sources, kept in the state dir: its
# path (which may not exist yet).
kept_bin() { echo "$dir/bin/$("$root/scripts/source-key.sh" local-cluster debug)/local-cluster"; }
# keep BIN: BIN becomes the kept binary of these sources (the newest four stay).
keep() {
  local kept tmp
  [[ -x $1 ]] || die "keep: no executable at '$1'"
  kept="$(kept_bin)"
  mkdir -p "$dir/bin"
  tmp="$(mktemp -d "$dir/bin/.new.XXXXXX")"
  cp "$1" "$tmp/local-cluster"
  mv -T "$tmp" "$(dirname "$kept")" 2>/dev/null || rm -rf "$tmp"
  # shellcheck disable=SC2012 # names are ours: hex keys
  ls -1dt "$dir"/bin/* 2>/dev/null | tail -n +5 | xargs -r rm -rf
}

prereqs() {
  [[ $(id -u) -eq 0 ]] || die "the real node needs root (a bridge, mounts, cgroups, kernel settings). fix: sudo $0 $*"
  local missing=() pkgs=()
  [[ -x /usr/sbin/runc ]] || { missing+=(runc); pkgs+=(runc); }
  [[ -x /usr/lib/cni/bridge ]] || { missing+=("CNI plugins"); pkgs+=(containernetworking-plugins); }
  command -v iptables >/dev/null 2>&1 || { missing+=(iptables); pkgs+=(iptables); }
  [[ -x /usr/bin/docker-registry ]] || { missing+=(docker-registry); pkgs+=(docker-registry); }
  command -v skopeo >/dev/null 2>&1 || { missing+=(skopeo); pkgs+=(skopeo); }
  command -v ip >/dev/null 2>&1 || { missing+=(iproute2); pkgs+=(iproute2); }
  command -v ipset >/dev/null 2>&1 || { missing+=(ipset); pkgs+=(ipset); }
  if [[ ${#pkgs[@]} -gt 0 ]]; then
    if command -v apt-get >/dev/null 2>&1; then
      say "missing: ${missing[*]}; installing with: apt-get install -y ${pkgs[*]}"
      (apt-get install -y "${pkgs[@]}" || (apt-get update && apt-get install -y "${pkgs[@]}")) >&2
    else
      die "missing: ${missing[*]}. fix: apt-get update && apt-get install -y ${pkgs[*]}"
    fi
  fi
  command -v cargo >/dev/null 2>&1 ||
    die "cargo not found. fix: curl https://sh.rustup.rs -sSf | sh -s -- -y --default-toolchain 1.95.0 && . ~/.cargo/env"
}

case "${1:-}" in
  up)
    if pid="$(running_pid)"; then
      say "already running (pid $pid); nothing changed"
      cat "$dir/env"
      exit 0
    fi
    prereqs "$@"
    if [[ -n "${SUDO_USER:-}" && "${SUDO_USER}" != root ]]; then
      say "builds run as root into $target (not ${SUDO_USER}'s checkout target/)"
    fi
    mkdir -p "$dir"
    say "cluster binaries (kube-apiserver, etcd, kubelet, scheduler, controller-manager, containerd; a cold Go build takes about 17 min on 2 cores)"
    BUZZ_TESTENV_BIN_DIR="$("$root/scripts/testenv-build.sh" | tail -n 1)"
    export BUZZ_TESTENV_BIN_DIR
    say "sprig image (binaries in the profile $BUZZ_STATIC_PROFILE; a cold build takes about 3 min of CPU, the shipped dist profile longer)"
    image_env="$("$root/scripts/image-build.sh" | tail -n 1)"
    set -a
    # shellcheck disable=SC1090
    . "$image_env"
    set +a
    bin="$(kept_bin)"
    if [[ -x $bin ]]; then
      say "local-cluster binary: built from these sources before ($bin)"
    else
      say "local-cluster binary: building buzz-conformance's (debug, into $target; minutes when cold: the test crate and its dependencies)"
      t0=$(date +%s)
      (cd "$root" && cargo build --quiet --locked -p buzz-conformance --bin local-cluster)
      keep "$target/debug/local-cluster"
      say "built in $(( $(date +%s) - t0 )) s"
    fi
    rm -f "$dir/ready" "$dir/pid"
    say "while it runs, the kubelet sets kernel.panic_on_oops=1 and kernel.panic=10 (a kernel oops reboots this machine 10 s later) and vm.overcommit_memory=1; \`$0 down\` restores them"
    BUZZ_REAL_NODE_LOCK_WAIT_SECS=0 nohup setsid "$bin" "$dir" "$ns" "$BUZZ_SPRIG_IMAGE_ARCHIVE" >"$dir/log" 2>&1 &
    pid=$!
    echo "$pid $(proc_start "$pid")" >"$dir/pid"
    for _ in $(seq 1 240); do
      [[ -f "$dir/ready" ]] && break
      if ! kill -0 "$pid" 2>/dev/null; then
        wait "$pid" 2>/dev/null && code=0 || code=$?
        rm -f "$dir/pid"
        [[ $code -eq 3 ]] && die "$(tail -n 2 "$dir/log")"
        die "it exited ($code); see $dir/log:
$(tail -n 15 "$dir/log")"
      fi
      sleep 0.5
    done
    [[ -f "$dir/ready" ]] || die "not ready after 120 s; see $dir/log:
$(tail -n 15 "$dir/log")"
    say "running (pid $pid); $(grep 'Ready in' "$dir/log" | tail -n 1)"
    say "kubeconfig $dir/kubeconfig; namespace $ns"
    cat "$dir/env"
    ;;
  down)
    if pid="$(running_pid)"; then
      kill -TERM "$pid"
      for _ in $(seq 1 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -0 "$pid" 2>/dev/null && die "pid $pid did not stop; see $dir/log"
      say "stopped"
    else
      say "not running"
    fi
    rm -f "$dir/pid" "$dir/ready"
    # A node that died without its teardown (SIGKILL, a crash mid-start) left
    # its state record: the same teardown runs now.
    bin="$(kept_bin)"
    [[ -x $bin ]] || bin="$target/debug/local-cluster"
    if [[ -x "$bin" && -f /run/buzz-real-node/state ]]; then
      "$bin" --sweep >&2 && code=0 || code=$?
      case $code in
        0) ;;
        3) say "another real node runs on this machine (not this state dir's); left alone" ;;
        *) die "the sweep of a stale node failed; see above" ;;
      esac
    fi
    ;;
  status)
    if pid="$(running_pid)"; then
      echo "running (pid $pid); kubeconfig $dir/kubeconfig"
    else
      echo "not running"
    fi
    ;;
  keep)
    [[ $# -eq 2 ]] || die "usage: scripts/local-cluster.sh keep BIN"
    keep "$2"
    ;;
  *) die "usage: scripts/local-cluster.sh up|down|status|keep BIN" ;;
esac
