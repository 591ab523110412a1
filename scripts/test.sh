#!/usr/bin/env bash
# The one test command. Builds what the tests need (the pinned kube-apiserver
# and etcd, cached by version; the sprig image, cached by its inputs), then
# runs format, lint and the whole test suite, every fuzz target's corpus
# replay among it. Works on a fresh machine of this project's kind: a missing
# prerequisite is installed, or the script stops with the exact command that
# fixes it. Nothing is skipped silently.
#
# What does not need the one before it runs beside it (issue 30 item 7): the
# cluster binaries (Go), the npm packages and the sprig image build in the
# background while fmt and clippy run; the suite waits for all three before
# `cargo test`. A background job's output is shown when it is waited for (in
# full when it failed). At the end, on success or failure, a table gives each
# phase's wall time and CPU time (issue 47 item 1).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
start=$(date +%s)
say() { printf '== %s\n' "$*" >&2; }
die() { printf 'test.sh: %s\n' "$*" >&2; exit 1; }

# --- phase times -----------------------------------------------------------------
# phase NAME: the foreground phase so far ends, NAME begins. A background job
# records its own time (bg_start / await below). Each row gives the wall
# seconds and the CPU seconds (user + system) of the phase's own processes
# (issue 47 item 1): on 2 cores a cold run is CPU-bound, so the CPU column
# says where a cut saves. A process tree's CPU is what the kernel counted for
# the children this shell (or the job's subshell) waited for, and theirs:
# what a daemon left running (a container under containerd's shim) is not in
# it, but it is in the last row, the machine's own busy CPU over the run
# (/proc/stat: every process, the suite's and anyone else's).
clk_tck=$(getconf CLK_TCK)
# tree_cpu PID: the CPU ticks of PID (a shell) and of its waited-for children.
tree_cpu() {
  local s f
  s=$(<"/proc/$1/stat")
  read -r -a f <<<"${s##*) }"
  echo $(( f[11] + f[12] + f[13] + f[14] ))
}
# machine_cpu: the machine's busy ticks since boot (all but idle and iowait).
machine_cpu() {
  local cpu user nice system idle iowait irq softirq steal rest
  read -r cpu user nice system idle iowait irq softirq steal rest </proc/stat
  echo $(( user + nice + system + irq + softirq + steal ))
}
secs() { echo $(( ($1 + clk_tck / 2) / clk_tck )); } # ticks -> whole seconds
machine_t0=$(machine_cpu)
phase_rows=()
phase_now="" phase_t0=$start phase_cpu0=$(tree_cpu $$)
# The CPU of the background jobs this shell reaped, so far: a foreground
# phase's own CPU leaves it out (the job has its own row). Bash reaps a job
# the moment it ends, whatever the foreground runs, and the kernel then adds
# its CPU to this shell's children: so a job's CPU is taken out of the phase
# in which it ended, once it is gone (kill -0 fails), from its .rc file.
bg_reaped=0 phase_bg0=0
declare -A bg_counted=()
count_reaped() {
  local name rc wall cpu
  for name in "${!bg_pid[@]}"; do
    [[ -z ${bg_counted[$name]:-} ]] || continue
    kill -0 "${bg_pid[$name]}" 2>/dev/null && continue
    read -r rc wall cpu <"$jobs_dir/$name.rc" 2>/dev/null || cpu=0
    bg_reaped=$(( bg_reaped + ${cpu:-0} ))
    bg_counted[$name]=1
  done
}
phase() {
  local t c
  count_reaped
  t=$(date +%s) c=$(tree_cpu $$)
  [[ -z $phase_now ]] ||
    phase_rows+=("$phase_now|$((t - phase_t0))|$(secs $((c - phase_cpu0 - (bg_reaped - phase_bg0))))|")
  phase_now=$1 phase_t0=$t phase_cpu0=$c phase_bg0=$bg_reaped
}
declare -A bg_pid=()
jobs_dir="$(mktemp -d)"
# Older than every file this run's builds write (scripts/target-sweep.sh).
touch "$jobs_dir/stamp"
kill_tree() { # PID: the process and its descendants, children first
  local c
  for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do kill_tree "$c"; done
  kill "$1" 2>/dev/null || true
}
report() {
  local rc=$? failed_in=$phase_now name row wall cpu note
  phase ""
  for name in "${!bg_pid[@]}"; do
    if kill -0 "${bg_pid[$name]}" 2>/dev/null; then
      kill_tree "${bg_pid[$name]}"
      phase_rows+=("$name|-|-|stopped: the suite ended before it")
    fi
  done
  {
    printf '\n== phase times (s): wall, CPU of its own processes\n'
    for row in "${phase_rows[@]}"; do
      IFS='|' read -r name wall cpu note <<<"$row"
      printf '   %-18s %6s %6s  %s\n' "$name" "$wall" "$cpu" "$note"
    done
    wall=$(( $(date +%s) - start ))
    printf '   %-18s %6s %6s  %s\n' total "$wall" "$(secs "$(tree_cpu $$)")" \
      "the suite's processes; the machine was busy $(secs $(( $(machine_cpu) - machine_t0 ))) CPU s of $(( wall * $(nproc) ))"
    if (( rc == 0 )); then
      printf '== all green in %s s\n' "$(( $(date +%s) - start ))"
    else
      printf '== FAILED (exit %s) in the phase "%s"\n' "$rc" "$failed_in"
    fi
  } >&2
  # A failed job's log is kept for the report above to point at.
  (( rc == 0 )) && rm -rf "$jobs_dir"
  return "$rc"
}
trap report EXIT
# bg_start NAME FUNCTION: runs FUNCTION in the background; its stdout and
# stderr go to files, its exit code and time with them.
bg_start() {
  local name=$1 fn=$2
  (
    t0=$(date +%s) me=$BASHPID
    if "$fn" >"$jobs_dir/$name.out" 2>"$jobs_dir/$name.log"; then rc=0; else rc=$?; fi
    # Whole or absent: test-lanes polls for it (a late job, below).
    echo "$rc $(( $(date +%s) - t0 )) $(tree_cpu "$me")" >"$jobs_dir/$name.rc.tmp"
    mv "$jobs_dir/$name.rc.tmp" "$jobs_dir/$name.rc"
    exit "$rc"
  ) &
  bg_pid[$name]=$!
}
# await NAME: waits for the job, shows its output, and stops the suite when it
# failed. The job's row says how long it ran and how long the suite waited.
await() {
  local name=$1 t0 rc wall cpu
  t0=$(date +%s)
  wait "${bg_pid[$name]}" || true
  count_reaped
  unset "bg_pid[$name]"
  read -r rc wall cpu <"$jobs_dir/$name.rc" || { rc=1 wall=- cpu=; }
  [[ -z $cpu ]] || cpu=$(secs "$cpu")
  phase_rows+=("$name|$wall|${cpu:--}|in the background; waited $(( $(date +%s) - t0 )) s for it")
  sed "s/^/   [$name] /" "$jobs_dir/$name.log" >&2
  (( rc == 0 )) || die "$name failed (exit $rc); its log: $jobs_dir/$name.log"
}
phase prerequisites

# --- prerequisites -----------------------------------------------------------
command -v cargo >/dev/null 2>&1 ||
  die "cargo not found. fix: curl https://sh.rustup.rs -sSf | sh -s -- -y --default-toolchain 1.95.0 && . ~/.cargo/env"
if command -v rustup >/dev/null 2>&1; then
  for comp in rustfmt clippy; do
    if ! rustup component list --installed 2>/dev/null | grep -q "^${comp}"; then
      say "installing rustup component ${comp}"
      rustup component add "${comp}"
    fi
  done
fi
cargo fmt --version >/dev/null 2>&1 || die "rustfmt missing. fix: rustup component add rustfmt"
cargo clippy --version >/dev/null 2>&1 || die "clippy missing. fix: rustup component add clippy"
command -v go >/dev/null 2>&1 ||
  die "go not found (needed once, to build the test control plane). fix: apt-get update && apt-get install -y golang-go (any Go >= 1.21 fetches the pinned toolchain itself)"
command -v cc >/dev/null 2>&1 || die "a C compiler is needed by ring. fix: apt-get update && apt-get install -y build-essential"
# The real node (kubelet, containerd, CNI, a local registry) runs as root
# with Debian's runc, CNI plugins, iptables, docker-registry and skopeo.
[[ $(id -u) -eq 0 ]] ||
  die "the suites run containers and a real Kubernetes node, which need root. fix: sudo scripts/test.sh"
export BUZZ_CHROMIUM="${BUZZ_CHROMIUM:-/usr/bin/chromium}"
# Cargo's incremental caches are off: a run builds each changed crate once
# and its next build comes with the next change, where the caches only grew
# (25 GB here, one directory per crate and variant, never removed). The
# build phase removes their directory and what no build makes any more.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
# A full disk fails a link with SIGBUS, deep in the build: say so first. A
# cold run writes about 20 GB (the builds, the image, the cluster binaries);
# a warm run's builds need a few GB before the sweep removes the old ones.
disk_dir=$target_dir
while [[ ! -d $disk_dir ]]; do disk_dir=$(dirname "$disk_dir"); done
free_kib=$(df -Pk "$disk_dir" | awk 'NR == 2 { print $4 }')
(( free_kib >= 3 * 1048576 )) ||
  die "only $(( free_kib / 1024 )) MiB free on the disk of $target_dir; a run needs at least 3 GiB (a cold one about 20 GiB). fix: free space there, or point CARGO_TARGET_DIR at a disk with room (what is largest: du -sh ${XDG_CACHE_HOME:-$HOME/.cache}/* $target_dir/*)"
# Every Debian package the run needs, installed here in one apt-get before
# any background job starts: two apt-gets at once fail on dpkg's lock (a
# fresh machine's run did, the image's and the relay's installs side by
# side). The scripts the jobs run keep their own checks for a run by hand.
apt_pkgs=()
# libfaketime runs the provider with a skewed local clock (GC same-clock rule test).
compgen -G '/usr/lib/*/faketime/libfaketime.so.1' >/dev/null || [[ -f /usr/lib/faketime/libfaketime.so.1 ]] ||
  apt_pkgs+=(faketime)
[[ -x /usr/sbin/runc ]] || apt_pkgs+=(runc)
[[ -x /usr/lib/cni/bridge ]] || apt_pkgs+=(containernetworking-plugins)
command -v iptables >/dev/null 2>&1 || apt_pkgs+=(iptables)
[[ -x /usr/bin/docker-registry ]] || apt_pkgs+=(docker-registry)
command -v skopeo >/dev/null 2>&1 || apt_pkgs+=(skopeo)
command -v ip >/dev/null 2>&1 || apt_pkgs+=(iproute2)
# kube-router's firewall, the real node's NetworkPolicy enforcer (issue 53),
# drives iptables through ipset.
command -v ipset >/dev/null 2>&1 || apt_pkgs+=(ipset)
# Chromium for the Start page's browser tests (headless, Debian's package).
[[ -x "$BUZZ_CHROMIUM" ]] || apt_pkgs+=(chromium)
# The image's build (scripts/image-build.sh) and nostr-rs-relay's (protoc,
# scripts/relay-build.sh).
for c in podman buildah mmdebstrap newuidmap; do
  command -v "$c" >/dev/null 2>&1 || { apt_pkgs+=(podman buildah mmdebstrap uidmap); break; }
done
command -v protoc >/dev/null 2>&1 || apt_pkgs+=(protobuf-compiler)
# The SSH provider's client and its test server's key tools
# (scripts/ssh-server.sh, --test ssh_provider), and flock for its lock.
command -v ssh >/dev/null 2>&1 && command -v ssh-keygen >/dev/null 2>&1 || apt_pkgs+=(openssh-client)
command -v flock >/dev/null 2>&1 || apt_pkgs+=(util-linux)
if [[ ${#apt_pkgs[@]} -gt 0 ]]; then
  command -v apt-get >/dev/null 2>&1 ||
    die "missing Debian packages ${apt_pkgs[*]}. fix: apt-get update && apt-get install -y ${apt_pkgs[*]}"
  say "installing ${apt_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt_install() { apt-get -o DPkg::Lock::Timeout=300 install -y "${apt_pkgs[@]}"; }
  (apt_install || (apt-get -o DPkg::Lock::Timeout=300 update && apt_install)) >/dev/null
fi

# Node packages, pinned, in private prefixes (installed in the background
# below). The real claude-code-acp for the harness suite's real-agent case
# (without credentials it fails authentication deterministically) and
# playwright-core for the Start page's browser test (it drives Debian's
# Chromium, never a downloaded browser).
npm_prefix="${XDG_CACHE_HOME:-$HOME/.cache}/buzz-npm"
export BUZZ_NPM_PREFIX="$npm_prefix"
export BUZZ_CLAUDE_CODE_ACP="$npm_prefix/node_modules/.bin/claude-code-acp"
npm_packages=(@zed-industries/claude-code-acp@0.16.2 playwright-core@1.65.1)
npm_stale=0
if [[ ! -x "$BUZZ_CLAUDE_CODE_ACP" || ! -f "$npm_prefix/node_modules/playwright-core/package.json" ]] ||
   ! grep -q '"version": "1.65.1"' "$npm_prefix/node_modules/playwright-core/package.json"; then
  npm_stale=1
fi
# The three real ACP agents (claude-agent-acp, codex-acp, gemini-cli), run
# offline against the fake model API (conformance/tests/real_agents_direct.rs),
# in their own prefix. The pins live once, in buzz-contract/src/agents.rs (its
# `npm: Some(("pkg", "ver"))` lines); a missing or moved pin reinstalls them.
agents_prefix="${XDG_CACHE_HOME:-$HOME/.cache}/buzz-agents"
export BUZZ_AGENTS_BIN="$agents_prefix/node_modules/.bin"
mapfile -t agent_pins < <(sed -n 's/.*npm: Some(("\([^"]*\)", "\([^"]*\)")).*/\1@\2/p' "$root/buzz-contract/src/agents.rs")
[[ ${#agent_pins[@]} -gt 0 ]] || die "no npm pins found in buzz-contract/src/agents.rs"
agents_stale=()
for pin in "${agent_pins[@]}"; do
  grep -qF "\"version\": \"${pin##*@}\"" "$agents_prefix/node_modules/${pin%@*}/package.json" 2>/dev/null ||
    agents_stale+=("$pin")
done
if (( npm_stale || ${#agents_stale[@]} )); then
  command -v npm >/dev/null 2>&1 ||
    die "npm not found (needed for the harness suite's real claude-code-acp, the Start page's browser test and the real ACP agents of real_agents_direct). fix: apt-get update && apt-get install -y nodejs npm"
fi
# (Run in the background under `if`, where set -e does not hold: each step
# returns its failure itself.)
npm_installs() {
  if (( npm_stale )); then
    echo "installing ${npm_packages[*]}" >&2
    npm install --prefix "$npm_prefix" --no-audit --no-fund --save-exact "${npm_packages[@]}" >&2 || return
  fi
  if (( ${#agents_stale[@]} )); then
    echo "installing ${agent_pins[*]} (missing: ${agents_stale[*]})" >&2
    npm install --prefix "$agents_prefix" --no-audit --no-fund --save-exact "${agent_pins[@]}" >&2 || return
  fi
}

# --- in the background: the cluster binaries, npm, the image --------------------
# The pinned kube-apiserver, etcd, kubelet, scheduler, controller-manager and
# containerd (cached by version), and the sprig image (cached by its inputs;
# its Debian packages came with the prerequisites above; it builds the base
# rootfs once per package set). Its static build locks
# target/<host>/suite, the test build target/debug: they run side by side.
# The image's binaries and the provider the real-node suite bakes are built
# in the `suite` profile (static glibc like the shipped `dist`, the dev
# profile's code; issue 47): scripts/static-build.sh reads it, here and in
# the tests that run it. What ships is built by scripts/release-build.sh in
# `dist` as before.
export BUZZ_STATIC_PROFILE=suite
# Clippy's lints with every warning an error, in the build that makes the
# tests (scripts/clippy-rustc.sh; issue 47): each workspace crate is
# compiled once, by clippy's driver, and every dependency once, by rustc,
# where `cargo clippy` and then `cargo test` compiled each twice. What it
# enforces is `cargo clippy --workspace --all-targets -- -D warnings`: every
# target of every crate (lib, bins, tests; the workspace has no examples or
# benches) is built, and linted, by one of the two builds of the "build and
# lint" phase. Exported before the background jobs, so every cargo of the run
# (the image's static build, test-lanes, the tests that build, the docs
# check) builds the workspace the same way and reuses what the others built.
clippy_driver="$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver || true)"
[[ -x $clippy_driver ]] || die "clippy-driver not found. fix: rustup component add clippy"
export BUZZ_CLIPPY_DRIVER="$clippy_driver" RUSTC_WORKSPACE_WRAPPER="$root/scripts/clippy-rustc.sh"
say "in the background: test cluster binaries, npm packages, sprig image, nostr-rs-relay"
bg_start "cluster binaries" "$root/scripts/testenv-build.sh"
bg_start npm npm_installs
bg_start image "$root/scripts/image-build.sh"
# The production relay the suite also runs against (issue 35), cached by
# version: a late job. Three test binaries need it, so the suite does not
# wait for it before the lanes: test-lanes runs those binaries last in their
# lanes, each once this job has ended (conformance/src/test_lanes.rs). It
# builds in cargo's dev profile (scripts/relay-build.sh --debug; issue 47:
# the suite needs its protocol and its store, not its speed; the benches
# build the release one), with a cargo home of its own, so it never holds
# the package cache lock the workspace's builds wait on. At nice 10: the
# build the lanes wait for comes first, and the relay still gets a tenth of
# the machine meanwhile and the cycles the lanes leave idle after (at nice
# 19, beside the fuzz smoke's builds, a cold run once waited for it 74
# minutes in).
relay_build() { nice -n 10 "$root/scripts/relay-build.sh" --debug; }
bg_start "nostr-rs-relay" relay_build

# --- format, then lint and build in one ------------------------------------------
phase fmt
say "cargo fmt --check"
cargo fmt --all -- --check

# The tests build beside the background jobs: nothing they compile reads
# what those jobs make.
phase "build and lint"
say "cargo test --no-run and cargo build --bins, with clippy's lints (-D warnings)"
cargo test --workspace --locked --no-run --quiet --message-format=json-render-diagnostics >"$jobs_dir/tests.json"
cargo build --workspace --bins --locked --quiet --message-format=json-render-diagnostics >"$jobs_dir/bins.json"
# What the builds above no longer make goes (a target directory kept between
# runs grew to 62 GB and filled the disk): the outputs of units no build made
# or found fresh, older than this run (scripts/target-sweep.sh). Incremental
# caches are off for the suite (below) and their directory goes with them.
say "$("$root/scripts/target-sweep.sh" "$target_dir/debug/deps" "$jobs_dir/stamp" "$jobs_dir/tests.json" "$jobs_dir/bins.json")"
rm -rf "$target_dir/debug/incremental" "$target_dir"/*/"$BUZZ_STATIC_PROFILE"/incremental
# The local cluster's binary of these sources, built with the tests: a
# fresh clone's `scripts/local-cluster.sh up` reuses it (issue 47 item 3).
"$root/scripts/local-cluster.sh" keep "$target_dir/debug/local-cluster"

phase "waiting for jobs"
await npm
await "cluster binaries"
BUZZ_TESTENV_BIN_DIR="$(tail -n 1 "$jobs_dir/cluster binaries.out")"
export BUZZ_TESTENV_BIN_DIR
for b in kube-apiserver etcd kubelet kube-scheduler kube-controller-manager containerd containerd-shim-runc-v2 ctr kube-router pause.oci.tar; do
  [[ -e "$BUZZ_TESTENV_BIN_DIR/$b" ]] || die "$b missing in '$BUZZ_TESTENV_BIN_DIR'; run scripts/testenv-build.sh"
done
await image
image_env="$(tail -n 1 "$jobs_dir/image.out")"
[[ -f "$image_env" ]] || die "scripts/image-build.sh did not report its env file"
set -a
# shellcheck disable=SC1090
. "$image_env"
set +a
# The provider with the image's digest baked in is built by the real-node
# suite itself, the way a user builds it: `scripts/release-build.sh
# 127.0.0.1:5213/buzz-sprig:<tag>` pushes the image to the node's registry
# and bakes the digest the registry serves (e2e_real_node). It shares the
# image's build (scripts/static-build.sh), so only the provider's own crates
# build then.

# --- the suite ---------------------------------------------------------------
# Every test binary of the workspace, in two lanes side by side: those that
# take the machine (the real node, podman) one after another, the rest one
# after another beside them, then the doc tests (conformance/src/test_lanes.rs).
# The tests were built above. Every fuzz target's checks run among them, on
# stable: its corpus, its crash inputs and seeded mutations
# (conformance/tests/fuzz_corpus.rs, issue 47). The instrumented fuzzing,
# five nightly builds of their own, is scripts/fuzz.sh's, run by hand.
phase "cargo test"
say "cargo test (two lanes; the late jobs beside them)"
BUZZ_TEST_LANES_JOBS="$jobs_dir" "$target_dir/debug/test-lanes"
phase "waiting for the relay"
await "nostr-rs-relay"

# Every guide's runnable blocks (```bash runnable), so the docs cannot rot.
phase "docs blocks"
say "docs: runnable blocks"
"$root/scripts/docs-check.sh"

