#!/usr/bin/env bash
# The one test command. Builds what the tests need (the pinned kube-apiserver
# and etcd, cached by version; the sprig image, cached by its inputs), then
# runs format, lint, the whole test suite and a short smoke of every fuzz
# target. Works on a fresh machine of this project's kind: a missing
# prerequisite is installed, or the script stops with the exact command that
# fixes it. Nothing is skipped silently.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
start=$(date +%s)
say() { printf '== %s\n' "$*" >&2; }
die() { printf 'test.sh: %s\n' "$*" >&2; exit 1; }

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
# libfaketime runs the provider with a skewed local clock (GC same-clock rule test).
if ! ls /usr/lib/*/faketime/libfaketime.so.1 /usr/lib/faketime/libfaketime.so.1 >/dev/null 2>&1; then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    say "installing faketime"
    (apt-get install -y faketime || (apt-get update && apt-get install -y faketime)) >/dev/null
  else
    die "libfaketime missing. fix: sudo apt-get update && sudo apt-get install -y faketime"
  fi
fi

# The real node (kubelet, containerd, CNI, a local registry) runs as root
# with Debian's runc, CNI plugins, iptables, docker-registry and skopeo.
[[ $(id -u) -eq 0 ]] ||
  die "the suites run containers and a real Kubernetes node, which need root. fix: sudo scripts/test.sh"
node_pkgs=()
[[ -x /usr/sbin/runc ]] || node_pkgs+=(runc)
[[ -x /usr/lib/cni/bridge ]] || node_pkgs+=(containernetworking-plugins)
command -v iptables >/dev/null 2>&1 || node_pkgs+=(iptables)
[[ -x /usr/bin/docker-registry ]] || node_pkgs+=(docker-registry)
command -v skopeo >/dev/null 2>&1 || node_pkgs+=(skopeo)
command -v ip >/dev/null 2>&1 || node_pkgs+=(iproute2)
if [[ ${#node_pkgs[@]} -gt 0 ]]; then
  command -v apt-get >/dev/null 2>&1 ||
    die "missing ${node_pkgs[*]}. fix: apt-get update && apt-get install -y ${node_pkgs[*]}"
  say "installing ${node_pkgs[*]}"
  (apt-get install -y "${node_pkgs[@]}" || (apt-get update && apt-get install -y "${node_pkgs[@]}")) >/dev/null
fi

# --- test cluster binaries (cached by version) ---------------------------------
say "test cluster binaries: kube-apiserver, etcd, kubelet, scheduler, controller-manager, containerd"
BUZZ_TESTENV_BIN_DIR="$("$root/scripts/testenv-build.sh" | tail -n 1)"
export BUZZ_TESTENV_BIN_DIR
for b in kube-apiserver etcd kubelet kube-scheduler kube-controller-manager containerd containerd-shim-runc-v2 ctr pause.oci.tar; do
  [[ -e "$BUZZ_TESTENV_BIN_DIR/$b" ]] || die "$b missing in '$BUZZ_TESTENV_BIN_DIR'; run scripts/testenv-build.sh"
done

# --- the suite ---------------------------------------------------------------
say "cargo fmt --check"
cargo fmt --all -- --check
say "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
# --- the sprig image (cached by its inputs) ------------------------------------
# Installs podman, buildah, runc and mmdebstrap when run as root, else stops
# with the command that does; builds the base rootfs once per package set.
say "sprig image"
image_env="$("$root/scripts/image-build.sh" | tail -n 1)"
[[ -f "$image_env" ]] || die "scripts/image-build.sh did not report its env file"
set -a
# shellcheck disable=SC1090
. "$image_env"
set +a
# The provider with the image's digest baked in is built by the real-node
# suite itself, the way a user builds it: `scripts/release-build.sh
# 127.0.0.1:5213/buzz-sprig:<tag>` pushes the image to the node's registry
# and bakes the digest the registry serves (e2e_real_node).

# Node packages, pinned, in one private prefix: the real claude-code-acp for
# the harness suite's real-agent case (without credentials it fails
# authentication deterministically) and playwright-core for the Start page's
# browser test (it drives Debian's Chromium, never a downloaded browser).
npm_prefix="${XDG_CACHE_HOME:-$HOME/.cache}/buzz-npm"
export BUZZ_NPM_PREFIX="$npm_prefix"
export BUZZ_CLAUDE_CODE_ACP="$npm_prefix/node_modules/.bin/claude-code-acp"
npm_packages=(@zed-industries/claude-code-acp@0.16.2 playwright-core@1.65.1)
if [[ ! -x "$BUZZ_CLAUDE_CODE_ACP" || ! -f "$npm_prefix/node_modules/playwright-core/package.json" ]] ||
   ! grep -q '"version": "1.65.1"' "$npm_prefix/node_modules/playwright-core/package.json"; then
  command -v npm >/dev/null 2>&1 ||
    die "npm not found (needed for the harness suite's real claude-code-acp and the Start page's browser test). fix: apt-get update && apt-get install -y nodejs npm"
  say "installing ${npm_packages[*]}"
  npm install --prefix "$npm_prefix" --no-audit --no-fund --save-exact "${npm_packages[@]}" >&2
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
if (( ${#agents_stale[@]} )); then
  command -v npm >/dev/null 2>&1 ||
    die "npm not found (needed for the real ACP agents of real_agents_direct). fix: apt-get update && apt-get install -y nodejs npm"
  say "installing ${agent_pins[*]} (missing: ${agents_stale[*]})"
  npm install --prefix "$agents_prefix" --no-audit --no-fund --save-exact "${agent_pins[@]}" >&2
fi
# Chromium for the Start page's browser test (headless, Debian's package).
export BUZZ_CHROMIUM="${BUZZ_CHROMIUM:-/usr/bin/chromium}"
if [[ ! -x "$BUZZ_CHROMIUM" ]]; then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    say "installing chromium"
    (apt-get install -y chromium || (apt-get update && apt-get install -y chromium)) >/dev/null
  else
    die "chromium missing (the Start page's browser test). fix: sudo apt-get update && sudo apt-get install -y chromium"
  fi
fi

say "cargo test"
cargo test --workspace --locked --no-fail-fast

# Every guide's runnable blocks (```bash runnable), so the docs cannot rot.
say "docs: runnable blocks"
"$root/scripts/docs-check.sh"

say "fuzz smoke"
"$root/scripts/fuzz.sh" --smoke
say "all green in $(( $(date +%s) - start )) s"
