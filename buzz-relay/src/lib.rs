//! The embedded relay (`buzz-launcher relay`): a real Nostr relay for the
//! owner and the owner's agents on one machine, so the whole loop (spec M1:
//! the relay is the only channel; I3 presence; §Stop `!shutdown`) runs with
//! nothing installed.
//!
//! Built on rust-nostr's relay library (`nostr-relay-builder`'s
//! `LocalRelay`: storage, filters, subscriptions, ephemeral broadcast) with a
//! front of our own on every connection ([`conn`]), because the library
//! challenges only on the first REQ or EVENT and its policies never see the
//! authenticated key:
//!
//! - **NIP-42 on connect** (wire-facts §2, as the Buzz relay does): the
//!   front sends `["AUTH", <challenge>]` once the WebSocket handshake is
//!   done (within [`Limits::handshake_timeout`]); before a successful AUTH,
//!   REQ/COUNT are answered `CLOSED auth-required:` and EVENT `OK false
//!   auth-required:`; a socket not authenticated within
//!   [`Limits::auth_timeout`] (5 s, like the Buzz relay) is closed.
//! - **Admission** ([`policy`]): the AUTH's `relay` tag must name this relay
//!   ([`own_urls`]: `ws://<bound addr>` and the configured public URLs), else
//!   `invalid:`; then the owner, and agents whose AUTH event carries a NIP-OA
//!   tag naming the owner and covering that AUTH event and, with an agent
//!   directory ([`agents`]), whose record still exists; everyone else
//!   `restricted:`. An agent's session lasts while its attestation's time
//!   window holds and its record exists; when either ends, its open
//!   subscriptions are closed. Presence (kind 20001) must be authored by the
//!   authenticated key and dated at most [`limits::PRESENCE_MAX_AHEAD`]
//!   ahead of the relay's clock.
//! - **Author-only kinds** ([`author_only`]): the owner's private agent
//!   records (kind 30179, issue 52) reach only their author's sessions, as
//!   on upstream's relay: an agent's REQ never gets one, and a COUNT or
//!   NEG-OPEN that could see one is refused.
//! - **Ephemeral presence**: kinds 20000–29999 are broadcast to live
//!   subscriptions and never stored (the library's rule, and
//!   [`log_store::LogStore`] refuses them too). Presence alone is also
//!   kept in memory, each author's latest for 180 s, and replayed to a REQ
//!   that names kind 20001 with a `since` ([`presence_keep`], as the Buzz
//!   relay's presence store does): `status` hears every agent at once
//!   instead of at its next republish.
//! - **Bounds** ([`Limits`]): authenticated sessions (a further accepted
//!   AUTH gets `OK false rate-limited:` and the socket is closed), sockets
//!   not yet authenticated (counted apart, so they never take a session's
//!   slot), subscriptions per connection (`CLOSED rate-limited:`), message size (`NOTICE invalid:` and close, at any size),
//!   events per minute per connection.
//! - **Shared library sessions** ([`lanes`], [`routes`]): the clients share
//!   at most [`Limits::lanes`] library sessions, their subscription ids
//!   renamed onto them and the answers renamed back (issue 49 item 4: one
//!   library session per client was 131 KB of socket buffer each).
//! - **One relay per data dir** ([`data_lock`]): [`serve`] binds the port
//!   first, then locks the data dir before it reads the log, so a second
//!   relay fails with [`ServeError::PortInUse`] or
//!   [`log_store::StoreOpenError::DataDirInUse`] and touches nothing.
//! - **Loopback by default**: a non-loopback listen address needs
//!   `allow_public` ([`check_listen`]); expose it to a VPS through a TLS
//!   reverse proxy instead (README "The embedded relay"), and name the
//!   proxy's `wss://` URL in [`Admission::public_urls`].

pub mod agents;
pub mod author_only;
mod conn;
pub mod data_lock;
mod front;
mod lanes;
pub mod limits;
mod log_file;
pub mod log_store;
pub mod own_urls;
pub mod policy;
pub mod presence_keep;
mod routes;

pub use limits::Limits;

use agents::AgentDirectory;
use conn::Ctx;
use log_store::{LogStore, Replay, StoreOpenError};
use nostr_relay_builder::prelude::{LocalRelay, RateLimit, RelayBuilder};
use own_urls::{BadPublicUrl, OwnUrls};
use presence_keep::PresenceKeep;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

/// How to run the relay.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// Listen address (port 0 picks a free port).
    pub listen: SocketAddr,
    /// Permits a non-loopback listen address.
    pub allow_public: bool,
    /// Data directory for the event log; `None` keeps events in memory only.
    pub data: Option<PathBuf>,
    /// The owner's pubkey, 64 lowercase hex.
    pub owner_hex: String,
    /// Bounds.
    pub limits: Limits,
}

/// Who may get in beyond the owner, and by which URLs ([`serve_with`]).
/// Kept apart from [`RelayConfig`] so existing `RelayConfig { .. }`
/// literals keep compiling; [`serve`] uses the default.
#[derive(Debug, Clone, Default)]
pub struct Admission {
    /// URLs clients reach this relay by besides `ws://<bound addr>`: the
    /// `wss://…` of a TLS reverse proxy in front of it. An AUTH's `relay`
    /// tag must name one of them or the bound address.
    pub public_urls: Vec<String>,
    /// Who is enrolled ([`agents::AgentDirectory`]; the launcher's agent
    /// records): an agent is admitted only while it is listed. `None` admits every agent the
    /// owner attested (tests and a relay without a state dir).
    pub agents: Option<Arc<dyn AgentDirectory>>,
}

/// A relay start failure.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(
        "refusing to listen on {0}: it is not a loopback address; pass --allow-public to expose the relay (better: keep it on 127.0.0.1 and put a TLS reverse proxy in front)"
    )]
    Public(SocketAddr),
    #[error("port {port} is already in use ({addr}); pick another with --listen 127.0.0.1:<port>")]
    PortInUse { addr: SocketAddr, port: u16 },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    PublicUrl(#[from] BadPublicUrl),
    #[error(transparent)]
    Store(#[from] StoreOpenError),
}

/// Refuses a non-loopback address unless `allow_public`.
pub fn check_listen(addr: SocketAddr, allow_public: bool) -> Result<(), ServeError> {
    if addr.ip().is_loopback() || allow_public {
        Ok(())
    } else {
        Err(ServeError::Public(addr))
    }
}

/// A running relay.
pub struct Running {
    addr: SocketAddr,
    ctx: Arc<Ctx>,
    /// What the event log held at start.
    pub replay: Replay,
}

impl Running {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `ws://<addr>`.
    pub fn url(&self) -> String {
        format!("ws://{}", self.addr)
    }

    /// How many sessions listen for live presence now: those with a
    /// subscription a presence can match (issue 49 item 4); the others are
    /// never woken by one.
    pub fn presence_readers(&self) -> usize {
        self.ctx.live_presence.receiver_count()
    }

    /// Every URL an AUTH's `relay` tag may name (canonical form).
    pub fn own_urls(&self) -> Vec<String> {
        self.ctx.urls.list().map(str::to_string).collect()
    }

    /// Stops accepting and ends every session.
    pub fn shutdown(&self) {
        // A watch value, not a notification: a connection busy with a frame
        // when the stop comes still sees it at its next wait.
        self.ctx.shutdown.send_replace(true);
        self.ctx.relay.shutdown();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// This machine's interface addresses (for an unspecified bind's own URLs).
fn interface_addresses() -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we walk read-only and
    // free exactly once with freeifaddrs.
    unsafe {
        if libc::getifaddrs(&mut head) != 0 {
            return out;
        }
        let mut cur = head;
        while !cur.is_null() {
            let sa = (*cur).ifa_addr;
            if !sa.is_null() {
                match i32::from((*sa).sa_family) {
                    libc::AF_INET => {
                        let v4 = &*(sa as *const libc::sockaddr_in);
                        out.push(IpAddr::from(u32::from_be(v4.sin_addr.s_addr).to_be_bytes()));
                    }
                    libc::AF_INET6 => {
                        let v6 = &*(sa as *const libc::sockaddr_in6);
                        out.push(IpAddr::from(v6.sin6_addr.s6_addr));
                    }
                    _ => {}
                }
            }
            cur = (*cur).ifa_next;
        }
        libc::freeifaddrs(head);
    }
    out
}

/// Binds, opens the store and starts serving on the current runtime, with
/// the default [`Admission`] (no public URL, no agent directory).
pub async fn serve(cfg: RelayConfig) -> Result<Running, ServeError> {
    serve_with(cfg, Admission::default()).await
}

/// Binds, locks and opens the store, and starts serving on the current runtime.
pub async fn serve_with(cfg: RelayConfig, admission: Admission) -> Result<Running, ServeError> {
    check_listen(cfg.listen, cfg.allow_public)?;
    // Bind before the store is touched: a second relay on the same port
    // fails here, before it could read or compact anything.
    let listener = TcpListener::bind(cfg.listen).await.map_err(|source| {
        if source.kind() == std::io::ErrorKind::AddrInUse {
            ServeError::PortInUse {
                addr: cfg.listen,
                port: cfg.listen.port(),
            }
        } else {
            ServeError::Bind {
                addr: cfg.listen,
                source,
            }
        }
    })?;
    let addr = listener.local_addr().map_err(|source| ServeError::Bind {
        addr: cfg.listen,
        source,
    })?;
    let interfaces = if addr.ip().is_unspecified() {
        interface_addresses()
    } else {
        Vec::new()
    };
    let urls = OwnUrls::new(addr, &interfaces, &admission.public_urls)?;
    let (store, replay) = match &cfg.data {
        Some(dir) => LogStore::open(dir).await?,
        None => (LogStore::in_memory(), Replay::default()),
    };
    let relay = LocalRelay::new(
        RelayBuilder::default()
            .addr(addr.ip())
            .port(addr.port())
            .database(store)
            // Per client, these are the front's ([`conn`]); a library
            // session is shared by many clients ([`lanes`]).
            .rate_limit(RateLimit {
                max_reqs: usize::MAX,
                notes_per_minute: u32::MAX,
            }),
    );
    let lanes = lanes::Lanes::new(relay.clone(), addr, &cfg.limits);
    let agents = admission.agents.map(|dir| Arc::new(agents::Shared::new(dir)));
    let ctx = Arc::new(Ctx {
        relay,
        lanes,
        owner_hex: cfg.owner_hex.clone(),
        urls,
        agents: agents.clone(),
        sessions: Arc::new(Semaphore::new(cfg.limits.max_connections)),
        pending: Arc::new(Semaphore::new(cfg.limits.max_pending)),
        limits: cfg.limits.clone(),
        shutdown: watch::channel(false).0,
        presence: PresenceKeep::default(),
        live_presence: tokio::sync::broadcast::channel(conn::LIVE_PRESENCE_CAPACITY).0,
    });
    if let Some(dir) = agents {
        let (every, stop) = (cfg.limits.records_recheck, ctx.shutdown.subscribe());
        tokio::spawn(async move { dir.recheck_every(every, stop).await });
    }
    tokio::spawn(conn::accept_loop(listener, ctx.clone()));
    Ok(Running { addr, ctx, replay })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_without_the_flag() {
        let lo: SocketAddr = "127.0.0.1:7000".parse().unwrap();
        let lo6: SocketAddr = "[::1]:7000".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:7000".parse().unwrap();
        assert!(check_listen(lo, false).is_ok() && check_listen(lo6, false).is_ok());
        let err = check_listen(any, false).unwrap_err();
        assert!(matches!(err, ServeError::Public(a) if a == any));
        assert!(err.to_string().contains("--allow-public"));
        assert!(check_listen(any, true).is_ok());
    }

    #[tokio::test]
    async fn a_port_in_use_is_named() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        let cfg = RelayConfig {
            listen: addr,
            allow_public: false,
            data: None,
            owner_hex: "a".repeat(64),
            limits: Limits::default(),
        };
        let err = serve(cfg).await.err().unwrap();
        assert!(matches!(err, ServeError::PortInUse { port, .. } if port == addr.port()));
        assert!(
            err.to_string()
                .contains(&format!("port {} is already in use", addr.port()))
        );
    }
}
