#!/usr/bin/env bash
# launch-harness.sh — a conforming [L1] launcher for the Buzz harness on a VPS
# (spec §Launchers layer 1, §Conformance [L1] items 1–3; wire-facts §5).
#
# usage: launch-harness.sh <env-file>
#
# The env file holds KEY=VALUE lines: blank lines and # comments allowed, an
# optional leading `export `, CRLF line ends and trailing whitespace ignored,
# values optionally wrapped in '…' or "…" (taken literally, no escapes).
# Keys must match [A-Z_][A-Z0-9_]*. The file is parsed, never executed: no
# part of it is expanded, evaluated (not even in arithmetic) or assigned to a
# shell variable of this script; its pairs go to the harness through `env`.
# No message of this script prints a value from the file.
#
# The file must not be readable by group or others (it holds the agent's
# key), as ssh requires of private keys.
# Required: BUZZ_PRIVATE_KEY, BUZZ_RELAY_URL, and BUZZ_AUTH_TAG or
# BUZZ_ACP_AGENT_OWNER — otherwise the script refuses to launch (I1). The
# harness then validates the whole configuration (`buzz-acp --check-config`:
# owner ≠ agent, key and tag shape, …) before it is launched for real.
# BUZZ_ACP_SHUTDOWN_BUDGET_SECS may not exceed the systemd unit's
# TimeoutStopSec (60 s), so that systemd never kills a stop in progress.
# BUZZ_ACP_NO_PRESENCE is never passed (I3: presence is the only remote signal).
# BUZZ_ACP_DOZE defaults to 300 (issue 50): an idle agent's processes end
# after 5 minutes and the harness stays on its relay, presence `away`, until
# the next mention; set BUZZ_ACP_DOZE=0 in the file to keep them.
# The script ends in `exec env … buzz-acp`, so the harness replaces this shell
# (same PID) and receives SIGTERM/SIGINT directly ([L1] item 3).
set -euo pipefail

# Largest shutdown budget, = TimeoutStopSec of scripts/buzz-acp.service.
readonly launch_max_budget_secs=60
# The doze bound when the env file names none (docs/harness.md "Dozing").
readonly launch_default_doze_secs=300

refuse() {
    echo "launch-harness: refusing to launch: $1" >&2
    exit "${2:-3}"
}

env_file="${1:-}"
[[ -n "$env_file" ]] || refuse "usage: launch-harness.sh <env-file>" 2
[[ -f "$env_file" && -r "$env_file" ]] || refuse "cannot read the env file" 2
mode="$(stat -L -c '%a' -- "$env_file")" || refuse "cannot stat the env file" 2
if [[ ! "$mode" =~ ^[0-7]*[0-7]00$ ]]; then
    refuse "the env file is readable by group or others (mode $mode); fix: chmod 600 '$env_file'" 2
fi

# Parsed pairs. Only this associative array holds file content; its
# subscripts are validated keys, never evaluated.
declare -A file_env=()
lineno=0
while IFS= read -r line || [[ -n "$line" ]]; do
    lineno=$((lineno + 1))
    # Strip a trailing CR and trailing whitespace, then leading whitespace.
    line="${line%$'\r'}"
    line="${line%"${line##*[![:space:]]}"}"
    line="${line#"${line%%[![:space:]]*}"}"
    [[ -z "$line" || "$line" == \#* ]] && continue
    [[ "$line" == "export "* ]] && line="${line#export }"
    [[ "$line" == *=* ]] || refuse "env file line $lineno is not KEY=VALUE" 2
    key="${line%%=*}"
    [[ "$key" =~ ^[A-Z_][A-Z0-9_]*$ ]] || refuse "env file line $lineno has an invalid key (want [A-Z_][A-Z0-9_]*)" 2
    value="${line#*=}"
    if [[ ${#value} -ge 2 && ( ( "$value" == \'*\' ) || ( "$value" == \"*\" ) ) ]]; then
        value="${value:1:${#value}-2}"
    fi
    if [[ "$key" == "BUZZ_ACP_NO_PRESENCE" ]]; then
        echo "launch-harness: ignoring BUZZ_ACP_NO_PRESENCE (presence is required remotely, I3)" >&2
        continue
    fi
    file_env["$key"]="$value"
done < "$env_file"

# True when the file set $1 to something other than whitespace.
has() {
    local v="${file_env[$1]-}"
    [[ -n "${v//[[:space:]]/}" ]]
}

has BUZZ_PRIVATE_KEY || refuse "BUZZ_PRIVATE_KEY is missing or empty"
has BUZZ_RELAY_URL || refuse "BUZZ_RELAY_URL is missing or empty"
if ! has BUZZ_AUTH_TAG && ! has BUZZ_ACP_AGENT_OWNER; then
    refuse "no owner: set BUZZ_AUTH_TAG or BUZZ_ACP_AGENT_OWNER"
fi
if has BUZZ_ACP_SHUTDOWN_BUDGET_SECS; then
    budget="${file_env[BUZZ_ACP_SHUTDOWN_BUDGET_SECS]}"
    [[ "$budget" =~ ^[0-9]+$ ]] || refuse "BUZZ_ACP_SHUTDOWN_BUDGET_SECS is not a whole number of seconds" 2
    # Compared as digit strings, never evaluated: no leading zeros, then length, then text.
    budget="${budget#"${budget%%[!0]*}"}"
    max="$launch_max_budget_secs"
    if [[ ${#budget} -gt ${#max} || ( ${#budget} -eq ${#max} && "$budget" > "$max" ) ]]; then
        refuse "BUZZ_ACP_SHUTDOWN_BUDGET_SECS exceeds TimeoutStopSec ($max s) of the systemd unit" 2
    fi
fi
# Doze by default on a VPS: nothing but the next mention wakes the agent.
has BUZZ_ACP_DOZE || file_env[BUZZ_ACP_DOZE]="$launch_default_doze_secs"
# Resolved with this script's PATH, before any file pair is in effect.
bin="$(command -v buzz-acp)" || refuse "buzz-acp is not on PATH" 2

pairs=()
for key in "${!file_env[@]}"; do
    pairs+=("$key=${file_env[$key]}")
done

# The harness's own validation (identity, owner ≠ agent, every knob), without connecting.
set +e
env -u BUZZ_ACP_NO_PRESENCE "${pairs[@]}" "$bin" --check-config
code=$?
set -e
[[ $code -eq 0 ]] || refuse "the harness refused the configuration (exit $code; see above)" "$code"

exec env -u BUZZ_ACP_NO_PRESENCE "${pairs[@]}" "$bin"
