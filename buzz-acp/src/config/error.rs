//! The harness's startup refusals, typed, and the exit reason each maps to
//! (spec I1, §Conformance \[L1\] exit codes; wire-facts §5).
//!
//! Every refusal happens before any connection. An identity refusal (no key, no
//! relay URL, no owner, the agent owning itself) exits with the identity
//! reason, a bad setting with the config reason, an unusable environment with
//! the internal one ([`StartupError::exit`]). Messages name the variable,
//! never a secret value.

use crate::exit::Exit;
use buzz_contract::gate::GateError;
use buzz_contract::keys::KeyError;

/// Identity refusals (I1): the harness refuses to start, before connecting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// `BUZZ_PRIVATE_KEY` missing or malformed.
    #[error("refusing to start: BUZZ_PRIVATE_KEY: {0}")]
    Key(#[from] KeyError),
    /// `BUZZ_PRIVATE_KEY` not set at all.
    #[error("refusing to start: BUZZ_PRIVATE_KEY is not set")]
    KeyMissing,
    /// `BUZZ_RELAY_URL` missing or empty.
    #[error("refusing to start: BUZZ_RELAY_URL is not set")]
    RelayMissing,
    /// Neither a verifying `BUZZ_AUTH_TAG` nor a valid `BUZZ_ACP_AGENT_OWNER`.
    #[error(
        "refusing to start: no owner (neither a verifying BUZZ_AUTH_TAG nor a 64-hex BUZZ_ACP_AGENT_OWNER); \
         !shutdown could never match"
    )]
    NoOwner,
    /// No auth tag verifies and `BUZZ_ACP_AGENT_OWNER` is not a pubkey: there is no owner.
    #[error(
        "refusing to start: no owner (BUZZ_ACP_AGENT_OWNER is not a 64-hex pubkey and no BUZZ_AUTH_TAG verifies); \
         !shutdown could never match"
    )]
    OwnerMalformed,
    /// The resolved owner is the agent itself: its own events are dropped,
    /// so its `!shutdown` could never be heard.
    #[error("refusing to start: the owner is the agent's own key; !shutdown could never be heard")]
    OwnerIsAgent,
}

/// The environment is unusable in a way no setting explains (exit 1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InternalError {
    /// The current directory cannot be read and `BUZZ_ACP_CWD` is not absolute.
    #[error("cannot determine the current directory (set an absolute BUZZ_ACP_CWD)")]
    Cwd,
}

/// Configuration errors. Messages name the variable, never a secret value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The shared rule's reason (it never quotes the URL).
    #[error("BUZZ_RELAY_URL: {0}")]
    RelayUrl(buzz_contract::relay_url::RelayUrlError),
    #[error("BUZZ_ACP_AGENTS must be in 1..=32")]
    Agents,
    #[error("BUZZ_ACP_AGENT_COMMAND is empty")]
    Command,
    #[error("{0}")]
    Gate(#[from] GateError),
    #[error("BUZZ_MANAGED_AGENT_START_NONCE must be exactly 32 lowercase hex")]
    Nonce,
    #[error("BUZZ_ACP_PRESENCE_INTERVAL_SECS must be at most 90 (presence expires after 180 s)")]
    PresenceInterval,
    #[error("{0} must be greater than zero")]
    Zero(&'static str),
    #[error("BUZZ_ACP_SHUTDOWN_BUDGET_SECS must exceed the 7 s finalization reserve")]
    Budget,
    #[error("BUZZ_ACP_CHANNELS entry {0} is empty or contains whitespace")]
    Channel(usize),
    #[error("BUZZ_ACP_PERMISSION_POLICY must be one of allow, reject, ask-owner")]
    PermissionPolicy,
    #[error("BUZZ_ACP_PERMISSION_POLICY_OTHERS must be one of allow, reject, ask-owner")]
    PermissionPolicyOthers,
    /// `BUZZ_ACP_PROBE_ADDR` cannot be parsed or bound (issue 49).
    #[error("{0}")]
    Probe(String),
    /// The wake env a launcher's waker set is malformed (issue 33).
    #[error("{0}")]
    Wake(buzz_contract::wake::WakeError),
    /// The agent command cannot run here (issue 30 item 3): the text says
    /// which command and how to get it.
    #[error("{0}")]
    AgentMissing(String),
}

/// Either refusal, mapped to its exit code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Internal(#[from] InternalError),
}

impl StartupError {
    /// The pinned exit reason.
    pub fn exit(&self) -> Exit {
        match self {
            StartupError::Identity(_) => Exit::Identity,
            StartupError::Config(_) => Exit::Config,
            StartupError::Internal(_) => Exit::Internal,
        }
    }
}
