//! Harness environment names and key sets (wire-facts §5; spec §Launch data,
//! §Auto-Stop "Reserved keys", invariant I3).

/// Relay WebSocket URL.
pub const RELAY_URL: &str = "BUZZ_RELAY_URL";
/// The agent's private key, nsec or hex.
pub const PRIVATE_KEY: &str = "BUZZ_PRIVATE_KEY";
/// The same key for git helpers; the harness does not read it.
pub const NOSTR_PRIVATE_KEY: &str = "NOSTR_PRIVATE_KEY";
/// NIP-OA owner attestation, a JSON array string.
pub const AUTH_TAG: &str = "BUZZ_AUTH_TAG";
/// 64-hex owner fallback when no auth tag verifies.
pub const AGENT_OWNER: &str = "BUZZ_ACP_AGENT_OWNER";
/// The channels the harness answers in, comma-separated (empty: every channel).
pub const CHANNELS: &str = "BUZZ_ACP_CHANNELS";
/// The agent sessions' working directory (default: the harness's own).
pub const SESSION_CWD: &str = "BUZZ_ACP_CWD";
/// ACP agent command name.
pub const AGENT_COMMAND: &str = "BUZZ_ACP_AGENT_COMMAND";
/// Comma-separated ACP agent args.
pub const AGENT_ARGS: &str = "BUZZ_ACP_AGENT_ARGS";
/// Parallel agent slots, 1..=[`MAX_AGENTS`].
pub const AGENTS: &str = "BUZZ_ACP_AGENTS";
/// The most parallel agent slots a harness runs (`BUZZ_ACP_AGENTS`).
pub const MAX_AGENTS: u64 = 32;
/// Seconds of ACP silence allowed within a turn.
pub const IDLE_TIMEOUT: &str = "BUZZ_ACP_IDLE_TIMEOUT";
/// Hard cap on one turn, seconds.
pub const MAX_TURN_DURATION: &str = "BUZZ_ACP_MAX_TURN_DURATION";
/// System prompt handed to the agent session.
pub const SYSTEM_PROMPT: &str = "BUZZ_ACP_SYSTEM_PROMPT";
/// Model selection handed to the agent.
pub const MODEL: &str = "BUZZ_ACP_MODEL";
/// The agent's session mode id, applied with `session/set_mode` (e.g.
/// `acceptEdits`, `full-access`, `yolo`).
pub const PERMISSION_MODE: &str = "BUZZ_ACP_PERMISSION_MODE";
/// How `session/request_permission` is answered: `allow`, `reject` or
/// `ask-owner` ([`crate::agents::PermissionPolicy`]).
pub const PERMISSION_POLICY: &str = "BUZZ_ACP_PERMISSION_POLICY";
/// How permission requests of a turn asked by anyone but the owner are
/// answered (`allow`, `reject`, `ask-owner`; default `reject`: a stranger
/// gets no tool use unless the owner says so; issue 30 item 2).
pub const PERMISSION_POLICY_OTHERS: &str = "BUZZ_ACP_PERMISSION_POLICY_OTHERS";
/// The file the harness writes its failure reason to, if it exists (the
/// container's termination message; default `/dev/termination-log`).
pub const TERMINATION_LOG: &str = "BUZZ_ACP_TERMINATION_LOG";
/// Seconds `ask-owner` waits for the owner's answer before it rejects.
pub const PERMISSION_TIMEOUT: &str = "BUZZ_ACP_PERMISSION_TIMEOUT_SECS";
/// Inbound author gate mode.
pub const RESPOND_TO: &str = "BUZZ_ACP_RESPOND_TO";
/// Comma-separated 64-hex allowlist.
pub const RESPOND_TO_ALLOWLIST: &str = "BUZZ_ACP_RESPOND_TO_ALLOWLIST";
/// Spawn agents only when work arrives.
pub const LAZY_POOL: &str = "BUZZ_ACP_LAZY_POOL";
/// I5 self-stop bound in seconds (0 = off).
pub const EXIT_AFTER_INACTIVITY: &str = "BUZZ_ACP_EXIT_AFTER_INACTIVITY";
/// Doze bound in seconds (0 = off; issue 50): after this long with no
/// turn, the harness ends its agent processes and stays on its relay,
/// presence `away`, until the next mention its gate accepts. Reserved: a
/// launcher writes it from the record (`--doze`), a provider from its
/// `doze_seconds`.
pub const DOZE: &str = "BUZZ_ACP_DOZE";
/// Suppress presence. Never set remotely (I3).
pub const NO_PRESENCE: &str = "BUZZ_ACP_NO_PRESENCE";
/// MCP server command handed to the agent.
pub const MCP_COMMAND: &str = "BUZZ_ACP_MCP_COMMAND";
/// Session title (control characters dropped, ≤ 80 chars).
pub const SESSION_TITLE: &str = "BUZZ_ACP_SESSION_TITLE";
/// Extra team instructions.
pub const TEAM_INSTRUCTIONS: &str = "BUZZ_ACP_TEAM_INSTRUCTIONS";
/// Owner-encrypted telemetry frames.
pub const RELAY_OBSERVER: &str = "BUZZ_ACP_RELAY_OBSERVER";
/// Queueing policy.
pub const DEDUP: &str = "BUZZ_ACP_DEDUP";
/// Multiple-event handling policy.
pub const MULTIPLE_EVENT_HANDLING: &str = "BUZZ_ACP_MULTIPLE_EVENT_HANDLING";
/// Launch generation, 32 lowercase hex.
pub const START_NONCE: &str = "BUZZ_MANAGED_AGENT_START_NONCE";
/// Desktop readiness state; never remote.
pub const SETUP_PAYLOAD: &str = "BUZZ_ACP_SETUP_PAYLOAD";
/// Brands local harness processes; never remote.
pub const MANAGED_AGENT: &str = "BUZZ_MANAGED_AGENT";
/// Host path of the Claude Code executable; never remote.
pub const CLAUDE_CODE_EXECUTABLE: &str = "CLAUDE_CODE_EXECUTABLE";
/// API token names that are identity material.
pub const API_TOKEN: &str = "BUZZ_API_TOKEN";
/// Legacy harness private key name.
pub const ACP_PRIVATE_KEY: &str = "BUZZ_ACP_PRIVATE_KEY";
/// Legacy harness API token name.
pub const ACP_API_TOKEN: &str = "BUZZ_ACP_API_TOKEN";

/// `BUZZ_ACP_AGENT_COMMAND` value that selects the harness's built-in echo
/// agent, a smoke test answering each prompt with its text (never the default).
pub const BUILTIN_ECHO_AGENT: &str = "builtin:echo";

/// The hidden first argument with which the harness runs itself as the
/// built-in echo agent (an ACP agent over stdio).
pub const BUILTIN_ECHO_ARG: &str = "__buzz-builtin-echo-agent";

/// Secrets only the harness itself reads: its identity key (both names) and
/// its auth tag. The harness removes them from its agents' environment, and
/// the image's entrypoint never hands them to a sidecar. `NOSTR_PRIVATE_KEY`
/// is not among them: the agent's git helpers read it (spec §Entrypoint
/// and launch ABI, mapping table).
pub const HARNESS_ONLY_SECRETS: &[&str] = &[PRIVATE_KEY, ACP_PRIVATE_KEY, AUTH_TAG];

/// Keys a user's env may never set (wire-facts §5). Launchers strip them;
/// providers write them only from top-level payload fields (spec §Reserved-key rule).
pub const RESERVED_ENV_KEYS: &[&str] = &[
    // identity
    PRIVATE_KEY,
    NOSTR_PRIVATE_KEY,
    AUTH_TAG,
    API_TOKEN,
    ACP_PRIVATE_KEY,
    ACP_API_TOKEN,
    RELAY_URL,
    // launch
    AGENT_COMMAND,
    AGENT_ARGS,
    MCP_COMMAND,
    // gate
    RESPOND_TO,
    RESPOND_TO_ALLOWLIST,
    AGENT_OWNER,
    // other
    SETUP_PAYLOAD,
    EXIT_AFTER_INACTIVITY,
    DOZE,
    NO_PRESENCE,
    crate::wake::EVENTS_ENV,
    crate::wake::SINCE_ENV,
];

/// Values resolved on the desktop's filesystem that must never reach a remote
/// agent from any tier (spec §Launch data "Host-resolved values").
pub const HOST_RESOLVED_KEYS: &[&str] = &[
    "PATH",
    "HOME",
    CLAUDE_CODE_EXECUTABLE,
    SETUP_PAYLOAD,
    MANAGED_AGENT,
];

/// True for a reserved key.
pub fn is_reserved(key: &str) -> bool {
    RESERVED_ENV_KEYS.contains(&key)
}

/// True for a host-resolved key.
pub fn is_host_resolved(key: &str) -> bool {
    HOST_RESOLVED_KEYS.contains(&key)
}

/// POSIX-shaped env name: `[A-Za-z_][A-Za-z0-9_]*`. Anything else (`=`, NUL,
/// spaces) could smuggle a reserved key past the strip (spec §Reserved-key rule).
pub fn is_posix_env_key(key: &str) -> bool {
    let mut chars = key.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Why a user-given env key was refused (issue 24 item 3: the same rule
/// for `--env`, an env file and every other channel; never quotes a key
/// that is not a name the launcher knows: it may be a secret typed without
/// its `=`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UserKeyError {
    #[error("the key is empty; write KEY=VALUE with a name such as GOOSE_MODEL")]
    Empty,
    #[error(
        "the key is not a POSIX name ([A-Za-z_][A-Za-z0-9_]*) (the key is not shown: it may hold a secret)"
    )]
    NotPosix,
    #[error("{0} is set by the launcher itself (reserved) and would never reach the agent; remove it")]
    Reserved(String),
    #[error("{0} is resolved on this machine (host-resolved) and never reaches an agent; remove it")]
    HostResolved(String),
}

/// The rule for an env key a user sets in any layer: a POSIX name that is
/// neither reserved nor host-resolved (a value under such a key would be
/// stripped before launch, so it is refused where it is typed instead).
pub fn check_user_key(key: &str) -> Result<(), UserKeyError> {
    if key.is_empty() {
        Err(UserKeyError::Empty)
    } else if !is_posix_env_key(key) {
        Err(UserKeyError::NotPosix)
    } else if is_reserved(key) {
        Err(UserKeyError::Reserved(key.to_string()))
    } else if is_host_resolved(key) {
        Err(UserKeyError::HostResolved(key.to_string()))
    } else {
        Ok(())
    }
}

/// Truthy env value as the harness reads booleans (`1`, `true`, `yes`, `on`).
pub fn is_truthy(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_set_contains_the_i3_and_i5_knobs() {
        assert!(is_reserved(NO_PRESENCE));
        assert!(is_reserved(EXIT_AFTER_INACTIVITY));
        assert!(is_reserved(PRIVATE_KEY) && is_reserved(AGENT_OWNER) && is_reserved(RELAY_URL));
        assert!(!is_reserved(MODEL), "tier-1 knobs stay overridable");
        assert!(!is_reserved(SYSTEM_PROMPT));
    }

    #[test]
    fn posix_keys() {
        for ok in ["A", "_x", "GOOSE_MODEL", "a1_B2"] {
            assert!(is_posix_env_key(ok), "{ok}");
        }
        for bad in ["", "1A", "BUZZ_AUTH_TAG=x", "A B", "A-B", "É", "A\0"] {
            assert!(!is_posix_env_key(bad), "{bad:?}");
        }
    }

    #[test]
    fn user_keys() {
        assert_eq!(check_user_key("GOOSE_MODEL"), Ok(()));
        assert_eq!(check_user_key(""), Err(UserKeyError::Empty));
        assert_eq!(check_user_key("A B"), Err(UserKeyError::NotPosix));
        assert_eq!(
            check_user_key(PRIVATE_KEY),
            Err(UserKeyError::Reserved(PRIVATE_KEY.into()))
        );
        assert_eq!(
            check_user_key("PATH"),
            Err(UserKeyError::HostResolved("PATH".into()))
        );
        assert!(!UserKeyError::NotPosix.to_string().contains("A B"));
    }

    #[test]
    fn host_resolved() {
        for k in [
            "PATH",
            "HOME",
            "CLAUDE_CODE_EXECUTABLE",
            "BUZZ_ACP_SETUP_PAYLOAD",
            "BUZZ_MANAGED_AGENT",
        ] {
            assert!(is_host_resolved(k));
        }
        assert!(!is_host_resolved("GOOSE_MODEL"));
    }
}
