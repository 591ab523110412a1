//! The embedded relay (`buzz-launcher relay`): a real Nostr relay for the
//! owner and the owner's agents on one machine, so the whole loop (spec M1:
//! the relay is the only channel; I3 presence; §Stop `!shutdown`) runs with
//! nothing installed.
//!
//! Built on rust-nostr's relay library (`nostr-relay-builder`'s
//! `LocalRelay`: storage, filters, subscriptions, ephemeral broadcast) with a
//! front of our own on every connection, because the library challenges
//! only on the first REQ or EVENT and its policies never see the
//! authenticated key:
//!
//! - **NIP-42 on connect** (wire-facts §2, as the Buzz relay does): the
//!   front sends `["AUTH", <challenge>]` when the socket opens; before a
//!   successful AUTH, REQ/COUNT are answered `CLOSED auth-required:` and
//!   EVENT `OK false auth-required:`; a socket not authenticated within
//!   [`Limits::auth_timeout`] (5 s, like the Buzz relay) is closed.
//! - **Admission** ([`policy`]): the owner, and agents whose AUTH event
//!   carries a NIP-OA tag naming the owner and covering that AUTH event;
//!   everyone else `restricted:`. An agent's session lasts while its
//!   attestation's time window holds. Presence (kind 20001) must be
//!   authored by the authenticated key.
//! - **Ephemeral presence**: kinds 20000–29999 are broadcast to live
//!   subscriptions and never stored (the library's rule, and
//!   [`log_store::LogStore`] refuses them too), so never replayed.
//! - **Bounds** ([`Limits`]): connections (the next one gets a `NOTICE
//!   restricted:` and is closed), subscriptions per connection (`CLOSED
//!   rate-limited:` from the library), message size (`NOTICE invalid:` and
//!   close), events per minute per connection.
//! - **Loopback by default**: a non-loopback listen address needs
//!   `allow_public` ([`check_listen`]); expose it to a VPS through a TLS
//!   reverse proxy instead (README "The embedded relay").
//!
//! Only after AUTH does the front attach the socket to the library's
//! session over an in-process pipe, forwarding text frames both ways.

pub mod log_store;
pub mod policy;

use futures::{SinkExt, StreamExt};
use log_store::{LogStore, Replay, StoreOpenError};
use nostr_relay_builder::prelude::{
    ClientMessage, JsonUtil, LocalRelay, RateLimit, RelayBuilder, RelayMessage,
};
use policy::Session;
use std::borrow::Cow;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

/// The relay's bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Concurrent WebSocket connections.
    pub max_connections: usize,
    /// Open subscriptions per connection.
    pub max_subscriptions: usize,
    /// Largest client message (a kind 9's content is at most 64 KiB,
    /// wire-facts §4; JSON escaping and tags need room beyond that).
    pub max_message_bytes: usize,
    /// Events per minute per connection.
    pub events_per_minute: u32,
    /// Time a socket has to authenticate.
    pub auth_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 256,
            max_subscriptions: 64,
            max_message_bytes: 256 * 1024,
            events_per_minute: 60_000,
            auth_timeout: Duration::from_secs(5),
        }
    }
}

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

/// A relay start failure.
#[derive(Debug, thiserror::Error)]
pub enum RelaydError {
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
    Store(#[from] StoreOpenError),
}

/// Refuses a non-loopback address unless `allow_public`.
pub fn check_listen(addr: SocketAddr, allow_public: bool) -> Result<(), RelaydError> {
    if addr.ip().is_loopback() || allow_public {
        Ok(())
    } else {
        Err(RelaydError::Public(addr))
    }
}

struct Ctx {
    relay: LocalRelay,
    owner_hex: String,
    limits: Limits,
    conns: Arc<Semaphore>,
    shutdown: watch::Sender<bool>,
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

/// Binds, opens the store and starts serving on the current runtime.
pub async fn serve(cfg: RelayConfig) -> Result<Running, RelaydError> {
    check_listen(cfg.listen, cfg.allow_public)?;
    let (store, replay) = match &cfg.data {
        Some(dir) => LogStore::open(dir).await?,
        None => (LogStore::in_memory(), Replay::default()),
    };
    let listener = TcpListener::bind(cfg.listen).await.map_err(|source| {
        if source.kind() == std::io::ErrorKind::AddrInUse {
            RelaydError::PortInUse {
                addr: cfg.listen,
                port: cfg.listen.port(),
            }
        } else {
            RelaydError::Bind {
                addr: cfg.listen,
                source,
            }
        }
    })?;
    let addr = listener.local_addr().map_err(|source| RelaydError::Bind {
        addr: cfg.listen,
        source,
    })?;
    let relay = LocalRelay::new(
        RelayBuilder::default()
            .addr(addr.ip())
            .port(addr.port())
            .database(store)
            .rate_limit(RateLimit {
                max_reqs: cfg.limits.max_subscriptions,
                notes_per_minute: cfg.limits.events_per_minute,
            }),
    );
    let ctx = Arc::new(Ctx {
        relay,
        owner_hex: cfg.owner_hex.clone(),
        conns: Arc::new(Semaphore::new(cfg.limits.max_connections)),
        limits: cfg.limits.clone(),
        shutdown: watch::channel(false).0,
    });
    let accept_ctx = ctx.clone();
    let mut stop = ctx.shutdown.subscribe();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                r = listener.accept() => match r {
                    Ok((stream, peer)) => {
                        let _ = stream.set_nodelay(true);
                        tokio::spawn(connection(stream, peer, accept_ctx.clone()));
                    }
                    Err(e) => {
                        tracing::warn!("cannot accept a connection: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                () = stopped(&mut stop) => break,
            }
        }
    });
    Ok(Running { addr, ctx, replay })
}

/// Resolves once the relay is stopping.
async fn stopped(rx: &mut watch::Receiver<bool>) {
    if rx.wait_for(|s| *s).await.is_err() {
        // The sender is gone: the relay is gone too.
    }
}

fn ws_config(max: usize) -> WebSocketConfig {
    // The hard transport cap sits above the relay's own limit so an
    // oversized message gets a NOTICE rather than a bare protocol error.
    let hard = max.saturating_add(64 * 1024);
    WebSocketConfig::default()
        .max_message_size(Some(hard))
        .max_frame_size(Some(hard))
}

fn text(msg: RelayMessage<'_>) -> Message {
    Message::text(msg.as_json())
}

fn notice(s: String) -> Message {
    text(RelayMessage::Notice(Cow::Owned(s)))
}

/// What the front does with one client message.
enum Step {
    /// Pass the original text to the library session.
    Forward,
    /// Answer the client directly.
    Reply(Message),
    /// Nothing to do.
    Ignore,
}

const AUTH_FIRST: &str = "auth-required: authenticate first (NIP-42)";

/// The front's decision for one text frame. `authed` is the authenticated
/// session, set by a successful AUTH.
fn decide(raw: &str, challenge: &str, ctx: &Ctx, authed: &mut Option<Session>) -> Step {
    let msg = match ClientMessage::from_json(raw) {
        Ok(m) => m,
        Err(e) => return Step::Reply(notice(format!("invalid: cannot parse the message: {e}"))),
    };
    match msg {
        ClientMessage::Auth(event) => {
            let verdict = policy::check_auth(&event, challenge, &ctx.owner_hex, crate::relay::unix_now());
            let key = event.pubkey.to_hex();
            let (status, message) = match verdict {
                Ok(_) if authed.as_ref().is_some_and(|a| a.key != key) => (
                    false,
                    "restricted: this connection is authenticated as another key".to_string(),
                ),
                Ok(admitted) => {
                    // A later AUTH by the same key renews its attestation.
                    *authed = Some(Session::new(key, admitted));
                    (true, String::new())
                }
                Err(r) => (false, r.to_string()),
            };
            Step::Reply(text(RelayMessage::Ok {
                event_id: event.id,
                status,
                message: Cow::Owned(message),
            }))
        }
        ClientMessage::Event(event) => match authed {
            None => Step::Reply(text(RelayMessage::Ok {
                event_id: event.id,
                status: false,
                message: Cow::Borrowed(AUTH_FIRST),
            })),
            Some(a) => match policy::check_publish(&event, a, crate::relay::unix_now()) {
                Ok(()) => Step::Forward,
                Err(r) => Step::Reply(text(RelayMessage::Ok {
                    event_id: event.id,
                    status: false,
                    message: Cow::Owned(r.to_string()),
                })),
            },
        },
        ClientMessage::Req { subscription_id, .. } | ClientMessage::Count { subscription_id, .. }
            if authed.is_none() =>
        {
            Step::Reply(text(RelayMessage::Closed {
                subscription_id,
                message: Cow::Borrowed(AUTH_FIRST),
            }))
        }
        ClientMessage::Req { subscription_id, .. } | ClientMessage::Count { subscription_id, .. } => {
            match authed.as_ref().map(|a| a.check(crate::relay::unix_now())) {
                Some(Err(r)) => Step::Reply(text(RelayMessage::Closed {
                    subscription_id,
                    message: Cow::Owned(r.to_string()),
                })),
                _ => Step::Forward,
            }
        }
        ClientMessage::Close(_) if authed.is_none() => Step::Ignore,
        _ if authed.is_none() => Step::Reply(notice(AUTH_FIRST.to_string())),
        _ => Step::Forward,
    }
}

type Ws = WebSocketStream<TcpStream>;

async fn close(mut ws: Ws) {
    let _ = tokio::time::timeout(Duration::from_secs(1), ws.close(None)).await;
}

/// Reads client frames until the socket authenticates; `None` when it
/// closed, timed out or the relay stops.
async fn authenticate(ws: &mut Ws, challenge: &str, ctx: &Ctx) -> Option<Session> {
    let deadline = tokio::time::sleep(ctx.limits.auth_timeout);
    tokio::pin!(deadline);
    let mut stop = ctx.shutdown.subscribe();
    let mut authed = None;
    loop {
        tokio::select! {
            m = ws.next() => {
                let raw = match m {
                    Some(Ok(Message::Text(t))) => t,
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return None,
                    Some(Ok(_)) => continue,
                };
                if raw.len() > ctx.limits.max_message_bytes {
                    let _ = ws.send(too_large(ctx)).await;
                    return None;
                }
                if let Step::Reply(m) = decide(&raw, challenge, ctx, &mut authed) {
                    ws.send(m).await.ok()?;
                }
                if authed.is_some() {
                    return authed;
                }
            }
            () = &mut deadline => {
                let _ = ws
                    .send(notice(format!(
                        "auth-required: not authenticated within {}s; closing",
                        ctx.limits.auth_timeout.as_secs()
                    )))
                    .await;
                return None;
            }
            () = stopped(&mut stop) => return None,
        }
    }
}

fn too_large(ctx: &Ctx) -> Message {
    notice(format!(
        "invalid: message larger than {} bytes; closing",
        ctx.limits.max_message_bytes
    ))
}

async fn connection(stream: TcpStream, peer: SocketAddr, ctx: Arc<Ctx>) {
    let permit = ctx.conns.clone().try_acquire_owned();
    let Ok(mut ws) =
        tokio_tungstenite::accept_async_with_config(stream, Some(ws_config(ctx.limits.max_message_bytes)))
            .await
    else {
        return;
    };
    let Ok(_permit) = permit else {
        let _ = ws
            .send(notice(format!(
                "restricted: too many connections (limit {}); closing",
                ctx.limits.max_connections
            )))
            .await;
        close(ws).await;
        return;
    };
    let challenge = hex::encode(rand::random::<[u8; 16]>());
    let hello = text(RelayMessage::Auth {
        challenge: Cow::Borrowed(&challenge),
    });
    if ws.send(hello).await.is_err() {
        return;
    }
    let Some(authed) = authenticate(&mut ws, &challenge, &ctx).await else {
        close(ws).await;
        return;
    };
    // Attach to the library's session over an in-process pipe.
    let (ours, theirs) = tokio::io::duplex(1 << 20);
    let relay = ctx.relay.clone();
    let session = tokio::spawn(async move {
        if let Err(e) = relay.take_connection(theirs, peer).await {
            tracing::debug!("relay session ended: {e}");
        }
    });
    let inner = WebSocketStream::from_raw_socket(ours, Role::Client, None).await;
    let (mut itx, mut irx) = inner.split();
    let (mut otx, mut orx) = ws.split();
    let mut authed = Some(authed);
    let mut stop = ctx.shutdown.subscribe();
    loop {
        tokio::select! {
            m = orx.next() => {
                let raw = match m {
                    Some(Ok(Message::Text(t))) => t,
                    Some(Ok(Message::Binary(_))) => {
                        if otx.send(notice("invalid: binary messages are not served".into())).await.is_err() {
                            break;
                        }
                        continue;
                    }
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
                    Some(Ok(_)) => continue,
                };
                if raw.len() > ctx.limits.max_message_bytes {
                    let _ = otx.send(too_large(&ctx)).await;
                    break;
                }
                let sent = match decide(&raw, &challenge, &ctx, &mut authed) {
                    Step::Forward => itx.send(Message::Text(raw)).await.is_ok(),
                    Step::Reply(m) => otx.send(m).await.is_ok(),
                    Step::Ignore => true,
                };
                if !sent {
                    break;
                }
            }
            m = irx.next() => match m {
                Some(Ok(Message::Text(t))) => {
                    if otx.send(Message::Text(t)).await.is_err() {
                        break;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => break,
            },
            () = stopped(&mut stop) => break,
        }
    }
    let _ = itx.close().await;
    let _ = tokio::time::timeout(Duration::from_secs(1), otx.close()).await;
    session.abort();
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
        assert!(matches!(err, RelaydError::Public(a) if a == any));
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
        assert!(matches!(err, RelaydError::PortInUse { port, .. } if port == addr.port()));
        assert!(
            err.to_string()
                .contains(&format!("port {} is already in use", addr.port()))
        );
    }
}
