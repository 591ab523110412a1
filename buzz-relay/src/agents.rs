//! Which agent keys the relay still admits (review b30b1a0 finding 11:
//! revocation). The relay admits an attested agent only while its directory
//! lists the agent's pubkey; the launcher's directory is its agent records
//! (`desktop_launcher::enrolled`), so deleting an agent refuses its key at
//! the next AUTH, and a session it holds ends within
//! [`super::Limits::records_recheck`].
//!
//! The relay never reads anyone's state: it asks this trait. A directory that
//! cannot be read is an error, so the caller fails closed.

use std::collections::HashSet;

/// The enrolled agents could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the enrolled agents: {0}")]
pub struct DirectoryError(pub Box<dyn std::error::Error + Send + Sync>);

/// A source of enrolled agent pubkeys. Reads are blocking (the relay calls
/// them on a blocking thread).
pub trait AgentDirectory: Send + Sync + std::fmt::Debug {
    /// Every enrolled agent's pubkey (64 lowercase hex), read now.
    fn enrolled(&self) -> Result<HashSet<String>, DirectoryError>;
}
