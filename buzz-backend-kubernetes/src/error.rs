//! In-band deploy errors: each renders as one sentence a person at a
//! terminal can act on, and none carries secret material (spec L2 item 5).

/// Why a request or deploy failed, by the stage that refused it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeployError {
    /// The request itself is malformed.
    #[error("{0}")]
    Request(String),
    /// `provider_config` is invalid.
    #[error("{0}")]
    Config(String),
    /// The payload is refused before any mutation (identity, owner, relay, env).
    #[error("{0}")]
    Refused(String),
    /// Kubeconfig or cluster access failed.
    #[error("{0}")]
    Cluster(String),
    /// An object at our name is not positively ours (§Deploy State Machine step 1).
    #[error("{0}")]
    Collision(String),
    /// The attempt this call made failed deterministically.
    #[error("{0}")]
    StartupFailed(String),
    /// The deadline expired while startup was still progressing; nothing was cleaned up.
    #[error("{0}")]
    StartupNotConfirmed(String),
}
