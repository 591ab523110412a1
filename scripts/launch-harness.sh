#!/usr/bin/env bash
# launch-harness.sh — a conforming [L1] launcher for the Buzz harness on a VPS
# (spec §Launchers layer 1, §Conformance [L1] items 1–3; wire-facts §5).
#
# usage: launch-harness.sh <env-file>
#
# The env file holds KEY=VALUE lines (blank lines and # comments allowed,
# values may be wrapped in '…' or "…"). It is parsed, never executed.
# Required: BUZZ_PRIVATE_KEY, BUZZ_RELAY_URL, and BUZZ_AUTH_TAG or
# BUZZ_ACP_AGENT_OWNER — otherwise the script refuses to launch (I1).
# BUZZ_ACP_NO_PRESENCE is never set (I3: presence is the only remote signal).
# The script ends in `exec buzz-acp`, so the harness replaces this shell and
# receives SIGTERM/SIGINT directly ([L1] item 3).
set -euo pipefail

refuse() {
    echo "launch-harness: refusing to launch: $1" >&2
    exit "${2:-3}"
}

env_file="${1:-}"
[[ -n "$env_file" ]] || refuse "usage: launch-harness.sh <env-file>" 2
[[ -f "$env_file" && -r "$env_file" ]] || refuse "cannot read the env file" 2

lineno=0
while IFS= read -r line || [[ -n "$line" ]]; do
    lineno=$((lineno + 1))
    line="${line#"${line%%[![:space:]]*}"}"
    [[ -z "$line" || "$line" == \#* ]] && continue
    line="${line#export }"
    key="${line%%=*}"
    [[ "$line" == *=* ]] || refuse "env file line $lineno is not KEY=VALUE" 2
    [[ "$key" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || refuse "env file line $lineno has an invalid key" 2
    value="${line#*=}"
    if [[ ${#value} -ge 2 && ( ( "$value" == \'*\' ) || ( "$value" == \"*\" ) ) ]]; then
        value="${value:1:${#value}-2}"
    fi
    if [[ "$key" == "BUZZ_ACP_NO_PRESENCE" ]]; then
        echo "launch-harness: ignoring BUZZ_ACP_NO_PRESENCE (presence is required remotely, I3)" >&2
        continue
    fi
    export "$key=$value"
done < "$env_file"
unset BUZZ_ACP_NO_PRESENCE

trimmed_key="${BUZZ_PRIVATE_KEY:-}"
trimmed_key="${trimmed_key//[[:space:]]/}"
[[ -n "$trimmed_key" ]] || refuse "BUZZ_PRIVATE_KEY is missing or empty"
relay="${BUZZ_RELAY_URL:-}"
[[ -n "${relay//[[:space:]]/}" ]] || refuse "BUZZ_RELAY_URL is missing or empty"
tag="${BUZZ_AUTH_TAG:-}"
owner="${BUZZ_ACP_AGENT_OWNER:-}"
if [[ -z "${tag//[[:space:]]/}" && -z "${owner//[[:space:]]/}" ]]; then
    refuse "no owner: set BUZZ_AUTH_TAG or BUZZ_ACP_AGENT_OWNER"
fi
command -v buzz-acp >/dev/null 2>&1 || refuse "buzz-acp is not on PATH" 2

exec buzz-acp
