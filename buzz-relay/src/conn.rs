//! One client socket of the embedded relay, from accept to close: the
//! front that runs NIP-42 on connect and admission ([`super::policy`])
//! before the socket joins a library session it shares with other clients
//! ([`super::lanes`], which renames its subscriptions, [`super::routes`]).
//! The bounds the library applied per session are applied here per client:
//! subscriptions ([`Limits::max_subscriptions`], `CLOSED rate-limited:`),
//! a subscription id's length ([`MAX_SUBSCRIPTION_ID`], `CLOSED invalid:`)
//! and events per minute ([`Limits::events_per_minute`], `OK false
//! rate-limited:`).
//!
//! The phases and their bounds (review b30b1a0 finding 4):
//!
//! 1. **Accept**: the socket takes a *pending* slot ([`Limits::max_pending`])
//!    or is closed at once; nothing else is spawned for it.
//! 2. **Handshake**: the WebSocket upgrade must finish within
//!    [`Limits::handshake_timeout`].
//! 3. **AUTH**: the challenge goes out at once; the socket must
//!    authenticate within [`Limits::auth_timeout`]. Only an accepted AUTH
//!    takes a *session* slot ([`Limits::max_connections`]); with none free
//!    the AUTH is answered `OK false rate-limited: too many connections`
//!    and the socket closed (`rate-limited:`, not `restricted:`: a busy
//!    relay is transient, and the harness treats `restricted:` as final).
//!    The pending slot is released then. So silent or slow sockets can
//!    delay other logins at most until their own timeouts, and never take
//!    an authenticated session's slot. Pending slots are not counted per
//!    peer address: the recommended exposure is a TLS reverse proxy on
//!    loopback, where every peer has the proxy's address.
//! 4. **Session**: frames pass both ways. An agent's session is *cut off*
//!    (finding 11) when its attestation's time window closes (a timer at
//!    [`Session::expires_at`]) or, with an agent directory, when its record
//!    is gone (one relay-wide re-read, made when the records' change token
//!    moved, polled every [`Limits::records_recheck`],
//!    [`super::agents::Shared`], so a fleet's sessions share it): its REQs
//!    are closed in the library and its negentropy session ends, and the
//!    client gets `CLOSED restricted:` / `NEG-ERR restricted:` for the
//!    subscriptions it opened; later EVENT, REQ, COUNT and `NEG-*` are
//!    refused with `restricted:`. A new AUTH that is accepted (a renewed
//!    attestation) lets it open subscriptions again.
//!
//! Presence ([`super::presence_keep`]) never reaches the library (issue 49
//! item 4): the library would wake every one of its sessions for each
//! presence to match it against their filters, and a fleet's 1 000
//! presences a minute across 1 000 sessions were most of the relay's CPU at
//! rest. The front verifies a presence the session may publish (its id and
//! signature; [`policy::check_publish`] decided the rest), keeps it, answers
//! `OK` and sends it on one relay-wide channel ([`Ctx::live_presence`]).
//! Only a session with a subscription a presence can match (a filter that
//! names kind 20001 or no kind) listens on that channel and matches it
//! against those filters; the harnesses' subscriptions name their kinds, so
//! their sessions are never woken by a presence. A REQ whose filters ask
//! for presence's recent past gets the kept events matching them just
//! before the library's EOSE for it (after the stored ones). A session that
//! falls behind the channel by [`LIVE_PRESENCE_CAPACITY`] loses the oldest
//! (presence is ephemeral; the next republish, or a REQ with `since`,
//! brings it back).
//!
//! A message over [`Limits::max_message_bytes`] gets `NOTICE invalid:` and
//! the socket is closed, whether it was read whole (up to the transport's
//! cap, [`TRANSPORT_SLACK`] above the bound) or refused from its frame
//! header (larger; tungstenite's capacity error leaves the socket writable,
//! which the old front treated as a bare close). The socket is then shut
//! for writing and drained for up to [`CLOSE_LINGER`]: closing a socket
//! with unread input makes the kernel send a reset, which can discard the
//! notice at a peer still sending its message (on loopback the test passes
//! without the drain; it is there for slower links).

use super::agents::Shared;
use super::front::{Out, Step, decide, notice, ok, text};
use super::lanes::{Lanes, LibraryTask, Member, open_pipe};
use super::limits::{CLOSE_LINGER, Limits, MAX_SUBSCRIPTION_ID, TRANSPORT_SLACK, WS_READ_BUFFER};
use super::own_urls::OwnUrls;
use super::policy::{self, Admitted, AuthContext, Enrollment, Session};
use super::presence_keep::{PresenceKeep, matches_live};
use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use nostr_relay_builder::prelude::{Event, Filter, JsonUtil, LocalRelay, RelayMessage, SubscriptionId};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast, watch};
use tokio::time::Instant;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

/// The wall clock in unix seconds (an AUTH's `created_at` and an
/// attestation's window are judged by it).
fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// What every connection shares.
pub(super) struct Ctx {
    pub relay: LocalRelay,
    /// The library sessions the clients share.
    pub lanes: Lanes,
    pub owner_hex: String,
    pub urls: OwnUrls,
    pub agents: Option<Arc<Shared>>,
    pub limits: Limits,
    pub sessions: Arc<Semaphore>,
    pub pending: Arc<Semaphore>,
    pub shutdown: watch::Sender<bool>,
    /// Each author's latest presence, replayed to REQs that ask for it.
    pub presence: PresenceKeep,
    /// Every accepted presence, live, for the sessions that can want it.
    pub live_presence: broadcast::Sender<Arc<Event>>,
}

/// The live presence channel's capacity: a fleet's reconnect burst (every
/// agent's `online` within seconds) fits, for a reader that keeps up.
pub(super) const LIVE_PRESENCE_CAPACITY: usize = 4096;

/// Resolves once the relay is stopping.
pub(super) async fn stopped(rx: &mut watch::Receiver<bool>) {
    if rx.wait_for(|s| *s).await.is_err() {
        // The sender is gone: the relay is gone too.
    }
}

/// Accepts until the relay stops; each socket needs a pending slot.
pub(super) async fn accept_loop(listener: TcpListener, ctx: Arc<Ctx>) {
    let mut stop = ctx.shutdown.subscribe();
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, peer)) => match ctx.pending.clone().try_acquire_owned() {
                    Ok(pending) => {
                        let _ = stream.set_nodelay(true);
                        tokio::spawn(connection(stream, peer, ctx.clone(), pending));
                    }
                    Err(_) => tracing::debug!(
                        "closing a socket from {peer}: {} sockets are already waiting to authenticate",
                        ctx.limits.max_pending
                    ),
                },
                Err(e) => {
                    tracing::warn!("cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            () = stopped(&mut stop) => break,
        }
    }
}

/// A client socket's WebSocket: the message bound, and a small read buffer
/// ([`WS_READ_BUFFER`]).
fn ws_config(max: usize) -> WebSocketConfig {
    let hard = max.saturating_add(TRANSPORT_SLACK);
    WebSocketConfig::default()
        .read_buffer_size(WS_READ_BUFFER)
        .max_message_size(Some(hard))
        .max_frame_size(Some(hard))
}

type Ws = WebSocketStream<TcpStream>;
type Inner = WebSocketStream<DuplexStream>;

/// A client's own library session for negentropy ([`super::lanes`]: its
/// errors end the session, so it is never shared).
struct Neg {
    tx: SplitSink<Inner, Message>,
    rx: SplitStream<Inner>,
    _task: LibraryTask,
}

async fn neg_next(neg: &mut Option<Neg>) -> Option<Result<Message, WsError>> {
    match neg {
        Some(n) => n.rx.next().await,
        None => std::future::pending().await,
    }
}

/// The next live presence, `None` for one lost to lag; pending without a
/// channel.
async fn next_presence(rx: &mut Option<broadcast::Receiver<Arc<Event>>>) -> Option<Arc<Event>> {
    let Some(r) = rx else {
        return std::future::pending().await;
    };
    match r.recv().await {
        Ok(e) => Some(e),
        Err(broadcast::error::RecvError::Lagged(n)) => {
            tracing::debug!("a session fell {n} presences behind; they are lost to it");
            None
        }
        Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
    }
}

/// The next relay-wide read of the records; pending forever without a
/// directory or once the relay has gone.
async fn roster_changed(
    rx: &mut Option<watch::Receiver<Option<Arc<HashSet<String>>>>>,
) -> Arc<HashSet<String>> {
    if let Some(rx) = rx {
        while rx.changed().await.is_ok() {
            if let Some(keys) = rx.borrow_and_update().clone() {
                return keys;
            }
        }
    }
    std::future::pending().await
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn close(mut ws: Ws) {
    let _ = tokio::time::timeout(CLOSE_LINGER, ws.close(None)).await;
}

/// Sends `NOTICE invalid:` for an oversized message, closes, and drains
/// what the peer is still sending so the notice reaches it.
async fn refuse_oversized(mut ws: Ws, max: usize) {
    let _ = tokio::time::timeout(CLOSE_LINGER, async {
        let _ = ws
            .send(notice(format!(
                "invalid: message larger than {max} bytes; closing"
            )))
            .await;
        let _ = ws.close(None).await;
    })
    .await;
    let tcp = ws.get_mut();
    let _ = tcp.shutdown().await;
    let _ = tokio::time::timeout(CLOSE_LINGER, async {
        let mut buf = vec![0u8; 64 * 1024];
        while matches!(tcp.read(&mut buf).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// How the unauthenticated phase ended.
enum Pre {
    Authed,
    TooLarge,
    Closed,
}

/// How an AUTH was answered.
#[derive(PartialEq, Eq)]
enum AuthOutcome {
    Accepted,
    Refused,
    /// Accepted, but no session slot was free: the socket closes.
    Full,
}

fn unix_now_precise() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default()
}

struct Conn {
    ctx: Arc<Ctx>,
    challenge: String,
    session: Option<Session>,
    slot: Option<OwnedSemaphorePermit>,
    subs: HashSet<SubscriptionId>,
    negs: HashSet<SubscriptionId>,
    /// REQs whose kept presence goes out before the library's EOSE.
    replays: HashMap<SubscriptionId, Vec<Filter>>,
    /// REQs a live presence can match, with those filters.
    live: HashMap<SubscriptionId, Vec<Filter>>,
    /// The live presence channel, while [`Conn::live`] is not empty.
    presence_rx: Option<broadcast::Receiver<Arc<Event>>>,
    /// Events (presence included) this session published in the current
    /// minute ([`Limits::events_per_minute`]).
    published: (Instant, u32),
    /// The agent's session was cut off and its library session detached.
    cut: bool,
}

async fn connection(stream: TcpStream, peer: SocketAddr, ctx: Arc<Ctx>, pending: OwnedSemaphorePermit) {
    let cfg = ws_config(ctx.limits.max_message_bytes);
    let handshake = tokio_tungstenite::accept_async_with_config(stream, Some(cfg));
    let Ok(Ok(mut ws)) = tokio::time::timeout(ctx.limits.handshake_timeout, handshake).await else {
        return;
    };
    let challenge = hex::encode(rand::random::<[u8; 16]>());
    let hello = text(RelayMessage::Auth {
        challenge: Cow::Borrowed(&challenge),
    });
    if ws.send(hello).await.is_err() {
        return;
    }
    let mut conn = Conn {
        ctx,
        challenge,
        session: None,
        slot: None,
        subs: HashSet::new(),
        negs: HashSet::new(),
        replays: HashMap::new(),
        live: HashMap::new(),
        presence_rx: None,
        published: (Instant::now(), 0),
        cut: false,
    };
    match conn.authenticate(&mut ws).await {
        Pre::Authed => {}
        Pre::TooLarge => return refuse_oversized(ws, conn.ctx.limits.max_message_bytes).await,
        Pre::Closed => return close(ws).await,
    }
    drop(pending);
    conn.serve(ws, peer).await;
}

impl Conn {
    /// The agent directory's answer for `key`, from a read that began
    /// after this call ([`Shared::fresh`]).
    async fn enrollment(&self, key: &str) -> Enrollment {
        let Some(dir) = self.ctx.agents.as_ref() else {
            return Enrollment::Unchecked;
        };
        match dir.fresh().await {
            Ok(keys) if keys.contains(key) => Enrollment::Enrolled,
            Ok(_) => Enrollment::Absent,
            Err(e) => {
                tracing::warn!("refusing an agent's AUTH: {e}");
                Enrollment::Unreadable
            }
        }
    }

    /// Decides an AUTH event and the answer to send.
    async fn auth(&mut self, event: &Event) -> (Message, AuthOutcome) {
        let cx = AuthContext {
            challenge: &self.challenge,
            urls: &self.ctx.urls,
            owner_hex: &self.ctx.owner_hex,
        };
        let key = event.pubkey.to_hex();
        let verdict = match policy::check_auth(event, cx, unix_now()) {
            Ok(agent @ Admitted::Agent(_)) => policy::check_enrollment(agent, self.enrollment(&key).await),
            other => other,
        };
        match verdict {
            Ok(_) if self.session.as_ref().is_some_and(|s| s.key != key) => (
                ok(
                    event,
                    false,
                    "restricted: this connection is authenticated as another key".into(),
                ),
                AuthOutcome::Refused,
            ),
            Ok(admitted) => {
                if self.slot.is_none() {
                    match self.ctx.sessions.clone().try_acquire_owned() {
                        Ok(slot) => self.slot = Some(slot),
                        Err(_) => {
                            let m = format!(
                                "rate-limited: too many connections (limit {}); closing, try again later",
                                self.ctx.limits.max_connections
                            );
                            return (ok(event, false, m), AuthOutcome::Full);
                        }
                    }
                }
                // A later AUTH by the same key renews its attestation.
                self.session = Some(Session::new(key, admitted));
                (ok(event, true, String::new()), AuthOutcome::Accepted)
            }
            Err(r) => (ok(event, false, r.to_string()), AuthOutcome::Refused),
        }
    }

    /// Reads client frames until the socket authenticates, closes, times
    /// out, sends too much or the relay stops.
    async fn authenticate(&mut self, ws: &mut Ws) -> Pre {
        let deadline = tokio::time::sleep(self.ctx.limits.auth_timeout);
        tokio::pin!(deadline);
        let mut stop = self.ctx.shutdown.subscribe();
        loop {
            tokio::select! {
                m = ws.next() => {
                    let raw = match m {
                        Some(Ok(Message::Text(t))) => t,
                        Some(Err(WsError::Capacity(_))) => return Pre::TooLarge,
                        Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return Pre::Closed,
                        Some(Ok(_)) => continue,
                    };
                    if raw.len() > self.ctx.limits.max_message_bytes {
                        return Pre::TooLarge;
                    }
                    let reply = match decide(&raw, None, unix_now()) {
                        Step::Reply(m) => Some((m, AuthOutcome::Refused)),
                        Step::Auth(event) => Some(self.auth(&event).await),
                        Step::Forward(_) | Step::Presence(_) | Step::Ignore => None,
                    };
                    if let Some((m, outcome)) = reply {
                        if ws.send(m).await.is_err() {
                            return Pre::Closed;
                        }
                        match outcome {
                            AuthOutcome::Accepted => return Pre::Authed,
                            AuthOutcome::Full => return Pre::Closed,
                            AuthOutcome::Refused => {}
                        }
                    }
                }
                () = &mut deadline => {
                    let _ = ws
                        .send(notice(format!(
                            "auth-required: not authenticated within {}s; closing",
                            self.ctx.limits.auth_timeout.as_secs_f32()
                        )))
                        .await;
                    return Pre::Closed;
                }
                () = stopped(&mut stop) => return Pre::Closed,
            }
        }
    }

    /// When the agent's attestation stops holding, as a monotonic instant.
    fn expiry(&self) -> Option<Instant> {
        if self.cut {
            return None;
        }
        let at = self.session.as_ref()?.expires_at()?;
        let left = Duration::from_secs(at).saturating_sub(unix_now_precise());
        Some(Instant::now() + left)
    }

    fn checks_records(&self) -> bool {
        !self.cut && self.ctx.agents.is_some() && self.session.as_ref().is_some_and(Session::is_agent)
    }

    /// Spends one of the session's events this minute (presence and the
    /// rest alike); `false` over [`Limits::events_per_minute`].
    fn spend_event(&mut self) -> bool {
        let (since, n) = &mut self.published;
        if since.elapsed() >= Duration::from_secs(60) {
            (*since, *n) = (Instant::now(), 0);
        }
        *n += 1;
        *n <= self.ctx.limits.events_per_minute
    }

    /// Bounds, renames and notes a message for the library: the frame for
    /// the shared lane, the raw text for the client's negentropy session,
    /// or the front's own answer.
    fn route(&mut self, out: Out, raw: &str, member: &Member) -> Routed {
        let limits = &self.ctx.limits;
        let closed = |id: SubscriptionId, m: String| {
            Routed::Reply(text(RelayMessage::Closed {
                subscription_id: Cow::Owned(id),
                message: Cow::Owned(m),
            }))
        };
        let too_long = |id: &SubscriptionId| id.as_str().chars().count() > MAX_SUBSCRIPTION_ID;
        let long = || format!("invalid: subscription id longer than {MAX_SUBSCRIPTION_ID} characters");
        match out {
            Out::Event(id) => {
                if !self.spend_event() {
                    return Routed::Reply(text(RelayMessage::Ok {
                        event_id: id,
                        status: false,
                        message: Cow::Borrowed("rate-limited: too many events this minute"),
                    }));
                }
                member.event(id);
                Routed::Lane(raw.to_string())
            }
            Out::Req { id, .. } if too_long(&id) => closed(id, long()),
            Out::Req { id, .. }
                if !self.subs.contains(&id) && self.subs.len() >= limits.max_subscriptions =>
            {
                let m = format!(
                    "rate-limited: too many subscriptions (limit {}); close one first",
                    limits.max_subscriptions
                );
                closed(id, m)
            }
            Out::Req {
                id,
                filters,
                replay,
                live,
            } => {
                if replay.is_empty() {
                    self.replays.remove(&id);
                } else {
                    self.replays.insert(id.clone(), replay);
                }
                if live.is_empty() {
                    self.live.remove(&id);
                } else {
                    self.live.insert(id.clone(), live);
                }
                self.follow_live_presence();
                self.subs.insert(id.clone());
                Routed::Lane(member.req(id, filters))
            }
            Out::Count { id, .. } if too_long(&id) => closed(id, long()),
            Out::Count { id, filter } => Routed::Lane(member.count(id, filter)),
            Out::Close(id) => {
                self.replays.remove(&id);
                self.live.remove(&id);
                self.subs.remove(&id);
                self.follow_live_presence();
                member.close(&id).map_or(Routed::Nothing, Routed::Lane)
            }
            Out::NegOpen(id)
                if too_long(&id)
                    || (!self.negs.contains(&id) && self.negs.len() >= limits.max_subscriptions) =>
            {
                Routed::Reply(text(RelayMessage::NegErr {
                    subscription_id: Cow::Owned(id),
                    message: Cow::Owned(format!(
                        "rate-limited: at most {} negentropy sessions, with ids up to {MAX_SUBSCRIPTION_ID} characters",
                        limits.max_subscriptions
                    )),
                }))
            }
            Out::NegOpen(id) => {
                self.negs.insert(id);
                Routed::Neg(raw.to_string())
            }
            Out::NegMsg => Routed::Neg(raw.to_string()),
            Out::NegClose(id) => {
                self.negs.remove(&id);
                Routed::Neg(raw.to_string())
            }
        }
    }

    /// Ends what an agent whose session no longer holds was receiving: its
    /// REQs are closed in the library (`pending`), its negentropy session
    /// ends, and the client is told for each.
    async fn cut_off(
        &mut self,
        member: &Member,
        pending: &mut VecDeque<String>,
        neg: &mut Option<Neg>,
        otx: &mut SplitSink<Ws, Message>,
    ) -> bool {
        let Some(Err(reason)) = self.session.as_ref().map(|s| s.check(unix_now())) else {
            return true;
        };
        self.cut = true;
        pending.extend(member.close_all());
        *neg = None;
        self.replays.clear();
        self.live.clear();
        self.presence_rx = None;
        let reason = reason.to_string();
        for id in std::mem::take(&mut self.subs) {
            let m = text(RelayMessage::Closed {
                subscription_id: Cow::Owned(id),
                message: Cow::Borrowed(&reason),
            });
            if otx.send(m).await.is_err() {
                return false;
            }
        }
        self.neg_failed(&reason, otx).await
    }

    /// Answers every open negentropy session `NEG-ERR reason`.
    async fn neg_failed(&mut self, reason: &str, otx: &mut SplitSink<Ws, Message>) -> bool {
        for id in std::mem::take(&mut self.negs) {
            let m = text(RelayMessage::NegErr {
                subscription_id: Cow::Owned(id),
                message: Cow::Borrowed(reason),
            });
            if otx.send(m).await.is_err() {
                return false;
            }
        }
        true
    }

    /// Reads a library answer on its way to the client: a `CLOSED` ends
    /// the subscription here too, and an EOSE of a REQ that asked for
    /// presence is preceded by the kept events ([`super::presence_keep`],
    /// sent here); `false` when the client is gone.
    /// Whether the library's `raw` is an author-only event of someone else
    /// ([`super::author_only`]).
    fn withheld(&self, raw: &str) -> bool {
        let key = self.session.as_ref().map(|s| s.key.as_str()).unwrap_or_default();
        super::author_only::withheld(raw, key)
    }

    async fn before_client(&mut self, raw: &str, otx: &mut SplitSink<Ws, Message>) -> bool {
        if raw.starts_with("[\"CLOSED\"") {
            if let Ok(RelayMessage::Closed { subscription_id, .. }) = RelayMessage::from_json(raw) {
                self.subs.remove(subscription_id.as_ref());
                self.replays.remove(subscription_id.as_ref());
                self.live.remove(subscription_id.as_ref());
                self.follow_live_presence();
            }
            return true;
        }
        if self.replays.is_empty() || !raw.starts_with("[\"EOSE\"") {
            return true;
        }
        let Ok(RelayMessage::EndOfStoredEvents(sid)) = RelayMessage::from_json(raw) else {
            return true;
        };
        let Some(filters) = self.replays.remove(sid.as_ref()) else {
            return true;
        };
        for event in self.ctx.presence.replay(&filters, unix_now()) {
            let m = text(RelayMessage::Event {
                subscription_id: Cow::Borrowed(sid.as_ref()),
                event: Cow::Owned(event),
            });
            if otx.send(m).await.is_err() {
                return false;
            }
        }
        true
    }

    /// A presence the session may publish (the front's decision): verified,
    /// kept and sent live, never to the library. The answer for the client.
    fn publish_presence(&mut self, event: Event) -> Message {
        if event.verify().is_err() {
            return ok(&event, false, "invalid: bad event id or signature".into());
        }
        if !self.spend_event() {
            return ok(&event, false, "rate-limited: too many events this minute".into());
        }
        let answer = ok(&event, true, String::new());
        self.ctx.presence.keep(&event, unix_now());
        // No session listening is not an error: nobody reads presence now.
        let _ = self.ctx.live_presence.send(Arc::new(event));
        answer
    }

    /// Listens on the live presence channel while a subscription can want
    /// presence, and not otherwise.
    fn follow_live_presence(&mut self) {
        match (self.live.is_empty(), self.presence_rx.is_some()) {
            (false, false) => self.presence_rx = Some(self.ctx.live_presence.subscribe()),
            (true, true) => self.presence_rx = None,
            _ => {}
        }
    }

    /// Sends a live presence to each subscription it matches; `false` when
    /// the client is gone.
    async fn deliver_presence(&self, event: &Event, otx: &mut SplitSink<Ws, Message>) -> bool {
        for (sid, filters) in &self.live {
            if filters.iter().any(|f| matches_live(f, event)) {
                let m = text(RelayMessage::Event {
                    subscription_id: Cow::Borrowed(sid),
                    event: Cow::Borrowed(event),
                });
                if otx.send(m).await.is_err() {
                    return false;
                }
            }
        }
        true
    }

    /// Sends a negentropy message to the client's own library session,
    /// opening it at the first; `false` when the session has failed (the
    /// client is answered `NEG-ERR` then).
    async fn send_neg(
        &mut self,
        raw: String,
        neg: &mut Option<Neg>,
        peer: SocketAddr,
        otx: &mut SplitSink<Ws, Message>,
    ) -> bool {
        if neg.is_none() {
            let (ws, task) = open_pipe(&self.ctx.relay, peer).await;
            let (tx, rx) = ws.split();
            *neg = Some(Neg { tx, rx, _task: task });
        }
        let Some(n) = neg.as_mut() else { return true };
        if n.tx.send(Message::text(raw)).await.is_ok() {
            return true;
        }
        *neg = None;
        self.neg_failed("error: the negentropy session ended; open it again", otx)
            .await
    }

    /// The authenticated phase: frames both ways until either side ends.
    async fn serve(mut self, ws: Ws, peer: SocketAddr) {
        let mut member = self.ctx.lanes.join().await;
        // Frames for the lane, sent as its writer takes them; the client's
        // socket is not read meanwhile, but its answers still are
        // ([`super::lanes`]).
        let mut pending: VecDeque<String> = VecDeque::new();
        let mut neg: Option<Neg> = None;
        let (mut otx, mut orx) = ws.split();
        let mut stop = self.ctx.shutdown.subscribe();
        // Live agent sessions follow the relay-wide re-read of the records.
        let mut roster = self.ctx.agents.as_ref().map(|d| d.roster());
        let mut too_large = false;
        loop {
            let expiry = self.expiry();
            let checks_records = self.checks_records();
            tokio::select! {
                m = orx.next(), if pending.is_empty() => {
                    let raw = match m {
                        Some(Ok(Message::Text(t))) => t,
                        Some(Ok(Message::Binary(_))) => {
                            if otx.send(notice("invalid: binary messages are not served".into())).await.is_err() {
                                break;
                            }
                            continue;
                        }
                        Some(Err(WsError::Capacity(_))) => {
                            too_large = true;
                            break;
                        }
                        Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
                        Some(Ok(_)) => continue,
                    };
                    if raw.len() > self.ctx.limits.max_message_bytes {
                        too_large = true;
                        break;
                    }
                    let sent = match decide(&raw, self.session.as_ref(), unix_now()) {
                        Step::Presence(event) => {
                            let answer = self.publish_presence(*event);
                            otx.send(answer).await.is_ok()
                        }
                        // A cut-off session has nothing open to send on.
                        Step::Forward(_) if self.cut => true,
                        Step::Forward(out) => match self.route(out, &raw, &member) {
                            Routed::Lane(frame) => {
                                pending.push_back(frame);
                                true
                            }
                            Routed::Neg(raw) => self.send_neg(raw, &mut neg, peer, &mut otx).await,
                            Routed::Reply(m) => otx.send(m).await.is_ok(),
                            Routed::Nothing => true,
                        },
                        Step::Reply(m) => otx.send(m).await.is_ok(),
                        Step::Auth(event) => {
                            let (m, outcome) = self.auth(&event).await;
                            if outcome == AuthOutcome::Accepted {
                                self.cut = false;
                            }
                            otx.send(m).await.is_ok() && outcome != AuthOutcome::Full
                        }
                        Step::Ignore => true,
                    };
                    if !sent {
                        break;
                    }
                }
                permit = member.outbox.reserve(), if !pending.is_empty() => match (permit, pending.pop_front()) {
                    (Ok(p), Some(frame)) => p.send(frame),
                    _ => break,
                },
                m = member.inbox.recv() => match m {
                    Some(t) if self.withheld(&t) => {}
                    Some(t) => {
                        if !self.before_client(&t, &mut otx).await || otx.send(Message::text(t)).await.is_err() {
                            break;
                        }
                    }
                    None => {
                        let m = "error: this connection fell behind reading, or the relay's store session ended; reconnect";
                        let _ = otx.send(notice(m.into())).await;
                        break;
                    }
                },
                m = neg_next(&mut neg) => match m {
                    Some(Ok(Message::Text(t))) => {
                        if otx.send(Message::Text(t)).await.is_err() {
                            break;
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(_)) | None => {
                        neg = None;
                        if !self.neg_failed("error: the negentropy session failed; open it again", &mut otx).await {
                            break;
                        }
                    }
                },
                e = next_presence(&mut self.presence_rx) => {
                    if let Some(e) = e && !self.deliver_presence(&e, &mut otx).await {
                        break;
                    }
                }
                () = sleep_until_opt(expiry) => {
                    if !self.cut_off(&member, &mut pending, &mut neg, &mut otx).await {
                        break;
                    }
                }
                keys = roster_changed(&mut roster), if checks_records => {
                    let key = self.session.as_ref().map(|s| s.key.as_str()).unwrap_or_default();
                    if !keys.contains(key) {
                        if let Some(s) = self.session.as_mut() {
                            s.remove();
                        }
                        if !self.cut_off(&member, &mut pending, &mut neg, &mut otx).await {
                            break;
                        }
                    }
                }
                () = stopped(&mut stop) => break,
            }
        }
        // Leaving the lane closes the client's REQs in the library.
        drop(member);
        drop(neg);
        if too_large {
            if let Ok(ws) = orx.reunite(otx) {
                refuse_oversized(ws, self.ctx.limits.max_message_bytes).await;
            }
            return;
        }
        let _ = tokio::time::timeout(CLOSE_LINGER, otx.close()).await;
    }
}

/// Where [`Conn::route`] sends a client message.
enum Routed {
    /// This frame, to the shared lane.
    Lane(String),
    /// This text, to the client's negentropy session.
    Neg(String),
    /// The front answers.
    Reply(Message),
    /// Nothing to send.
    Nothing,
}
