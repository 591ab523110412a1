#!/bin/bash
# The sprig image's entrypoint (spec §Entrypoint and launch ABI).
#
# It does two things and then becomes the harness:
#   1. starts the image's sidecars (the collector agent) with an allowlisted
#      environment: never the agent's key, its auth tag or the user's env
#      (but for the egress proxy settings);
#   2. `exec buzz-acp`, so the harness is PID 1 and receives the pod's
#      SIGTERM itself. buzz-acp, as PID 1, forwards the stop to the sidecars
#      and reaps them within its shutdown budget.
# No `set -u`: the env names below are optional. Nothing here prints a value.
set -e

cd "${HOME:-/home/agent}"

# Names a sidecar may see. Exact names only: a prefix would let a user env
# var through. Downward-API identity and the collector's own settings.
# This list is buzz_contract::sidecar::SIDECAR_ENV_ALLOWLIST, name for name
# (a buzz-contract test reads it from here). The provider refuses every
# identity and RUNTIME_AGENT_* name in user env, so what PID 1 holds under
# these names is the deployer's alone. The proxy names are ordinary env (the
# user may set them for the agent's egress; the collector follows them).
sidecar_env_allow=(
  PATH HOME TZ LANG HOSTNAME
  POD_NAME POD_NAMESPACE POD_UID NODE_NAME CONTAINER_NAME IMAGE_REF IMAGE_DIGEST
  RUNTIME_AGENT_INGEST_URL RUNTIME_AGENT_SPOOL_DIR RUNTIME_AGENT_INTERVAL_SECS
  RUNTIME_AGENT_SHIP_INTERVAL_SECS
  HTTPS_PROXY https_proxy HTTP_PROXY http_proxy NO_PROXY no_proxy
)

start_sidecar() {
  local exe=$1 name keep=()
  for name in "${sidecar_env_allow[@]}"; do
    if [[ -n ${!name+x} ]]; then keep+=("$name=${!name}"); fi
  done
  # env -i: the sidecar's environment (and /proc/<pid>/environ) holds only `keep`.
  env -i "${keep[@]}" "$exe" </dev/null &
}

# Sidecars: every executable in this directory, in name order. The product
# image installs the collector here; the directory may be empty.
for exe in /etc/buzz/sidecars.d/*; do
  if [[ -f $exe && -x $exe ]]; then start_sidecar "$exe"; fi
done

exec buzz-acp
