//! The embedded default relay as an operation (DESIGN.md "Embedded relay";
//! issue 11): the start on demand that `start`, `chat`, `status`, the Start
//! page and `demo` make before they talk to an agent whose relay is this
//! state dir's, its `status` and `stop`, and `relay` in the foreground. The
//! relay server itself is the `buzz-relay` crate; this state dir's port,
//! pid and lock are [`crate::embedded`]; who the relay admits is
//! [`crate::enrolled::Enrolled`], the records, looked up at every AUTH.

use crate::embedded;
use crate::enrolled::Enrolled;
use crate::record::AgentRecord;
use crate::store::{Store, StoreError};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use crate::embedded::{EmbeddedError, Ensured, Stale, Stopped};

/// Starts this state dir's relay in the background when one of `agents`
/// uses it and it is not serving; `None` when none of them uses it.
pub fn ensure_for(store: &Store, agents: &[AgentRecord]) -> Result<Option<Ensured>, EmbeddedError> {
    embedded::ensure_for(store, agents)
}

/// Starts this state dir's relay with `program` (a `buzz-launcher`) unless
/// it is serving.
pub fn ensure_running(store: &Store, program: &Path) -> Result<Ensured, EmbeddedError> {
    embedded::ensure_running(store, program)
}

/// Ends this state dir's background relay, if it runs and is ours.
pub fn stop(store: &Store) -> Result<Stopped, EmbeddedError> {
    embedded::stop(store)
}

/// This state dir's relay URL (`ws://HOST:PORT`).
pub fn url(store: &Store) -> Result<String, EmbeddedError> {
    embedded::url(store)
}

/// `relay status`: the URL, and the pid when it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub url: String,
    pub pid: Option<u32>,
}

pub fn status(store: &Store) -> Result<Status, EmbeddedError> {
    Ok(Status {
        url: embedded::url(store)?,
        pid: embedded::running(store)?,
    })
}

/// `relay` in the foreground: where to listen and what to serve. `None`
/// takes this state dir's address and data dir.
#[derive(Debug, Clone, Default)]
pub struct Serve {
    pub listen: Option<SocketAddr>,
    pub data: Option<PathBuf>,
    pub allow_public: bool,
    pub public_urls: Vec<String>,
    /// Authenticated sessions at once (default [`buzz_relay::limits::MAX_CONNECTIONS`]).
    pub max_sessions: Option<usize>,
}

/// A relay serving in this process.
pub struct Serving {
    pub running: buzz_relay::Running,
    /// The owner it serves (hex).
    pub owner: String,
    pub data: PathBuf,
    /// It bound this state dir's own address, so it recorded itself as the
    /// embedded relay (and clears that at [`Serving::shutdown`]).
    pub is_default: bool,
}

/// Why `relay` could not serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Embedded(#[from] EmbeddedError),
    #[error(transparent)]
    Relay(#[from] buzz_relay::ServeError),
}

/// Raises this process's soft limit of open files to its hard limit (a
/// relay serving a fleet holds a socket per agent).
pub fn raise_open_files() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                tracing::warn!(
                    "cannot raise the open-files limit: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
    }
}

/// Serves the owner and its agents. Agents are admitted only while their
/// record exists in `store` (revocation is deleting the record). Only the
/// process that bound this state dir's own port records itself.
pub async fn serve(store: &Store, opts: Serve) -> Result<Serving, ServeError> {
    let owner = store.owner()?.public_key().to_hex();
    let state_port = embedded::port(store)?;
    let host = embedded::host()?;
    let listen = opts
        .listen
        .unwrap_or_else(|| SocketAddr::from((host, state_port)));
    let data = opts.data.unwrap_or_else(|| embedded::data_dir(store));
    let mut limits = buzz_relay::Limits::default();
    if let Some(n) = opts.max_sessions {
        limits.max_connections = n;
    }
    // Each session is a socket: a fleet needs more descriptors than the
    // usual soft limit of 1 024.
    raise_open_files();
    let cfg = buzz_relay::RelayConfig {
        listen,
        allow_public: opts.allow_public,
        data: Some(data.clone()),
        owner_hex: owner.clone(),
        limits,
    };
    let admission = buzz_relay::Admission {
        public_urls: opts.public_urls,
        agents: Some(Arc::new(Enrolled::new(store.clone()))),
    };
    let running = buzz_relay::serve_with(cfg, admission).await?;
    let is_default = running.addr().ip() == IpAddr::V4(host) && running.addr().port() == state_port;
    if is_default {
        embedded::record_self(store, &data)?;
    }
    Ok(Serving {
        running,
        owner,
        data,
        is_default,
    })
}

impl Serving {
    /// Stops serving, and forgets the recorded embedded relay if it was this one.
    pub fn shutdown(self, store: &Store) -> Result<(), StoreError> {
        self.running.shutdown();
        if self.is_default {
            embedded::clear_self(store)?;
        }
        Ok(())
    }
}
