//! In-band errors of the SSH binding: each renders as one sentence a
//! person at a terminal can act on (with its fix where there is one), and
//! none carries secret material (spec L2 item 5; the caller scrubs every
//! answer once more with the payload's redactor).

use crate::outcome::HostFailure;
use crate::ssh::SshFailure;
use buzz_provider::payload::Rejected;
use buzz_provider::refusal::{ConfigError, Refusal};
use buzz_provider::request::RequestError;

/// Why a request, a deploy or an undeploy failed, by the stage that refused it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SshError {
    /// The request itself is malformed.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// `provider_config` is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The payload is refused before anything is run (identity, owner,
    /// relay, env).
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The harness binary to install could not be found or read here.
    #[error("{0}")]
    Harness(String),
    /// ssh could not log in or reach the host.
    #[error(transparent)]
    Ssh(#[from] SshFailure),
    /// A check or a step on the host refused.
    #[error("on {host}: {failure}")]
    Host { host: String, failure: HostFailure },
    /// The host's script ended without saying how (a lost connection, a
    /// killed shell).
    #[error(
        "on {host}: the script ended without an answer (ssh exit {status}){detail}; nothing is known to have changed, Start again"
    )]
    NoAnswer {
        host: String,
        status: String,
        detail: String,
    },
    /// ssh could not be run on this machine.
    #[error("could not run ssh here: {0}. fix: install the OpenSSH client (apt-get install openssh-client)")]
    Local(String),
}

impl From<Rejected> for SshError {
    fn from(r: Rejected) -> Self {
        match r {
            Rejected::Request(e) => e.into(),
            Rejected::Refused(e) => e.into(),
        }
    }
}
