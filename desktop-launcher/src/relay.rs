//! The relay boundary (spec M1, §Stop and Delete, I3; wire-facts §3, §4):
//! owner-signed `!shutdown`, chat mentions and the kind-20001 presence
//! subscription. The relay is the only channel to a running agent.
//!
//! [`connect`] names what failed (issue 24 "a relay that never answers its
//! handshake is named as such"): nothing listening or an unreachable host
//! within [`TCP_WAIT`], then a listener that accepted the TCP connection but
//! did not answer the WebSocket handshake within [`HANDSHAKE_WAIT`] — not
//! the client library's bare `timeout`.

use crate::presence::{Change, Tracker};
use buzz_contract::presence::{KIND_CHANNEL_MESSAGE, KIND_PRESENCE, SHUTDOWN_COMMAND};
use nostr_sdk::prelude::*;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::broadcast::error::RecvError;

/// A relay failure. Names the relay, never a key.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("cannot connect to relay {url}: {message}")]
    Connect { url: String, message: String },
    #[error("cannot reach relay {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error(
        "relay {url} accepted the TCP connection but did not answer the WebSocket handshake within {secs}s; \
         is this the relay's address (host, port, ws:// or wss://)?"
    )]
    NoHandshake { url: String, secs: u64 },
    #[error("relay {url} did not accept the event: {message}")]
    Publish { url: String, message: String },
    #[error("`{0}` is not a valid pubkey")]
    BadPubkey(String),
    #[error("no reply from the agent within {0:?}")]
    NoReply(Duration),
    /// The agent is known to be gone while a chat waits (its sentence).
    #[error("{0}")]
    AgentGone(String),
}

/// How long the TCP connection to a relay may take.
pub const TCP_WAIT: Duration = Duration::from_secs(3);
/// How long a relay that accepted the TCP connection may take to answer
/// the WebSocket (and TLS) handshake.
pub const HANDSHAKE_WAIT: Duration = Duration::from_secs(3);

/// Why a TCP connection failed, in words a user acts on.
fn tcp_reason(addr: &str, e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => {
            format!("connection refused: nothing listens on {addr} (is the relay running?)")
        }
        std::io::ErrorKind::TimedOut => format!("no TCP answer from {addr} within {}s", TCP_WAIT.as_secs()),
        _ => format!("{addr}: {e}"),
    }
}

/// Reaches the relay's host and port over TCP (the first half of a
/// connection, told apart from the handshake). `Ok` when it cannot be
/// judged here (no host in the URL): the client library then says why.
async fn reach_tcp(url: &str, wait: Duration) -> Result<(), RelayError> {
    let Ok(parsed) = Url::parse(url) else {
        return Ok(());
    };
    let (Some(host), Some(port)) = (parsed.host_str(), parsed.port_or_known_default()) else {
        return Ok(());
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addr = format!("{host}:{port}");
    let unreachable = |reason: String| RelayError::Unreachable {
        url: url.to_string(),
        reason,
    };
    match tokio::time::timeout(wait, tokio::net::TcpStream::connect((host, port))).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(unreachable(tcp_reason(&addr, &e))),
        Err(_) => Err(unreachable(format!(
            "no TCP answer from {addr} within {}s",
            wait.as_secs()
        ))),
    }
}

/// Unix seconds now.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A connected client signing as `keys` (the owner, for stop and chat).
/// The TCP connection may take [`TCP_WAIT`] and the handshake
/// [`HANDSHAKE_WAIT`], each at most `timeout`; each failure is named.
pub async fn connect(url: &str, keys: Keys, timeout: Duration) -> Result<Client, RelayError> {
    let err = |m: String| RelayError::Connect {
        url: url.to_string(),
        message: m,
    };
    let client = Client::builder().signer(keys).build();
    client.add_relay(url).await.map_err(|e| err(e.to_string()))?;
    reach_tcp(url, timeout.min(TCP_WAIT)).await?;
    let handshake = timeout.min(HANDSHAKE_WAIT);
    let started = tokio::time::Instant::now();
    if let Err(e) = client.try_connect_relay(url, handshake).await {
        client.shutdown().await;
        // The listener was there a moment ago: a silent one is not a relay.
        if started.elapsed() >= handshake {
            return Err(RelayError::NoHandshake {
                url: url.to_string(),
                secs: handshake.as_secs(),
            });
        }
        return Err(err(e.to_string()));
    }
    Ok(client)
}

fn pubkey(hex: &str) -> Result<PublicKey, RelayError> {
    PublicKey::from_hex(hex).map_err(|_| RelayError::BadPubkey(hex.to_string()))
}

fn kind9(content: &str, agent: &PublicKey, channel: Option<&str>) -> EventBuilder {
    let mut b = EventBuilder::new(Kind::from(KIND_CHANNEL_MESSAGE), content).tag(Tag::public_key(*agent));
    if let Some(h) = channel.filter(|c| !c.is_empty())
        && let Ok(tag) = Tag::parse(["h", h])
    {
        b = b.tag(tag);
    }
    b
}

/// Posts the owner's mention of `agent_hex` with nothing awaited after it
/// (a sleeping agent with no waker: the mention waits on the relay for one).
pub async fn mention(
    client: &Client,
    url: &str,
    agent_hex: &str,
    channel: Option<&str>,
    text: &str,
) -> Result<String, RelayError> {
    let agent = pubkey(agent_hex)?;
    Ok(publish(client, url, kind9(text, &agent, channel)).await?.to_hex())
}

async fn publish(client: &Client, url: &str, builder: EventBuilder) -> Result<EventId, RelayError> {
    let out = client
        .send_event_builder(builder)
        .await
        .map_err(|e| RelayError::Publish {
            url: url.to_string(),
            message: e.to_string(),
        })?;
    accepted(url, out)
}

/// The event's id when a relay accepted it, else the relay's reason.
fn accepted(url: &str, out: Output<EventId>) -> Result<EventId, RelayError> {
    if out.success.is_empty() {
        let message = out
            .failed
            .values()
            .next()
            .cloned()
            .unwrap_or_else(|| "no relay accepted it".to_string());
        return Err(RelayError::Publish {
            url: url.to_string(),
            message,
        });
    }
    Ok(out.val)
}

/// Publishes `event`, signed already; its id once the relay accepted it.
pub async fn publish_event(client: &Client, url: &str, event: &Event) -> Result<EventId, RelayError> {
    let out = client.send_event(event).await.map_err(|e| RelayError::Publish {
        url: url.to_string(),
        message: e.to_string(),
    })?;
    accepted(url, out)
}

/// Publishes the owner-signed `!shutdown` that p-tags the agent (spec §Stop; wire-facts §4).
pub async fn send_shutdown(
    client: &Client,
    url: &str,
    agent_hex: &str,
    channel: Option<&str>,
) -> Result<EventId, RelayError> {
    let agent = pubkey(agent_hex)?;
    publish(client, url, kind9(SHUTDOWN_COMMAND, &agent, channel)).await
}

/// What a chat hears while it waits.
pub enum Heard<'a> {
    /// An event of the agent's about the mention ([`crate::waits::classify`]).
    Progress(&'a crate::waits::ChatEvent),
    /// The agent's presence, fresh since the chat began (its content).
    Presence(&'a str),
    /// Nothing for [`CHAT_TICK`]: a moment to check the agent is still there.
    Tick,
}

/// How often a waiting chat checks on its agent.
pub const CHAT_TICK: Duration = Duration::from_millis(250);

/// Sends a mention and waits for the agent's reply (a kind 9 by the agent
/// that references the mention in an `e` tag). `on_heard` sees the queued
/// reaction and typing indicator about the mention, the agent's fresh
/// presence and a tick every [`CHAT_TICK`]; a `Some` sentence from it ends
/// the wait at once ([`RelayError::AgentGone`]).
pub async fn chat(
    client: &Client,
    url: &str,
    agent_hex: &str,
    channel: Option<&str>,
    text: &str,
    wait: Duration,
    on_heard: &mut dyn FnMut(Heard<'_>) -> Option<String>,
) -> Result<String, RelayError> {
    use crate::waits::{ChatEvent, classify};
    use buzz_contract::presence::{KIND_REACTION, KIND_TYPING};
    let agent = pubkey(agent_hex)?;
    let mut notes = client.notifications();
    let began = unix_now();
    let sub = Filter::new()
        .kinds([
            Kind::from(KIND_CHANNEL_MESSAGE),
            Kind::from(KIND_REACTION),
            Kind::from(KIND_TYPING),
            Kind::from(KIND_PRESENCE),
        ])
        .author(agent)
        .since(Timestamp::from(began.saturating_sub(5)));
    // The reply can come within milliseconds of the mention: the
    // subscription must be live before the mention goes out.
    subscribe_live(client, url, sub, SUBSCRIPTION_LIVE_BOUND).await?;
    let id = publish(client, url, kind9(text, &agent, channel)).await?;
    let mention = id.to_hex();
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Err(RelayError::NoReply(wait));
        }
        let heard = match tokio::time::timeout(left.min(CHAT_TICK), notes.recv()).await {
            Err(_) => on_heard(Heard::Tick),
            Ok(Err(RecvError::Lagged(_))) => None,
            Ok(Err(RecvError::Closed)) => return Err(RelayError::NoReply(wait)),
            Ok(Ok(RelayPoolNotification::Event { event, .. })) if event.pubkey == agent => {
                let kind = event.kind.as_u16();
                if kind == KIND_PRESENCE {
                    // Only presence published after the mention went out is news.
                    if event.created_at.as_secs() + 1 < began {
                        continue;
                    }
                    on_heard(Heard::Presence(&event.content))
                } else {
                    let e_tags: Vec<String> = event.tags.event_ids().map(|e| e.to_hex()).collect();
                    match classify(kind, &event.content, &e_tags, &mention) {
                        Some(ChatEvent::Reply(text)) => return Ok(text),
                        Some(step) => on_heard(Heard::Progress(&step)),
                        None => None,
                    }
                }
            }
            Ok(Ok(_)) => None,
        };
        if let Some(why) = heard {
            return Err(RelayError::AgentGone(why));
        }
    }
}

/// A live kind-20001 subscription (subscribe first, then act, then pump:
/// nothing published in between is missed).
pub struct PresenceFeed {
    notes: tokio::sync::broadcast::Receiver<RelayPoolNotification>,
}

/// Subscribes to kind 20001 for `authors` (64-hex pubkeys), created at or
/// after `since` (unix seconds). The relay may ignore `since`; the
/// [`Tracker`]'s own floor drops such replays anyway.
pub async fn subscribe_presence(
    client: &Client,
    url: &str,
    authors: &[String],
    since: u64,
) -> Result<PresenceFeed, RelayError> {
    let pks: Vec<PublicKey> = authors.iter().map(|a| pubkey(a)).collect::<Result<_, _>>()?;
    let notes = client.notifications();
    let filter = Filter::new()
        .kind(Kind::from(KIND_PRESENCE))
        .authors(pks)
        .since(Timestamp::from(since));
    // Presence is ephemeral: an event published before the relay holds our
    // subscription is gone for us. Callers act (`!shutdown`) right after
    // this returns, so the subscription is live first.
    subscribe_live(client, url, filter, SUBSCRIPTION_LIVE_BOUND).await?;
    Ok(PresenceFeed { notes })
}

/// A live subscription to agents' mentions and presence: what the waker
/// watches (issue 33). Events come verified by the client library.
pub struct WakeFeed {
    notes: tokio::sync::broadcast::Receiver<RelayPoolNotification>,
}

/// Subscribes to kind 9 events that mention `agents` (their `p` tags),
/// created at or after `since`, and to the agents' presence from now on.
pub async fn subscribe_wake(
    client: &Client,
    url: &str,
    agents: &[String],
    since: u64,
) -> Result<WakeFeed, RelayError> {
    let pks: Vec<PublicKey> = agents.iter().map(|a| pubkey(a)).collect::<Result<_, _>>()?;
    let notes = client.notifications();
    let mentions = Filter::new()
        .kind(Kind::from(buzz_contract::presence::KIND_CHANNEL_MESSAGE))
        .pubkeys(pks.clone())
        .since(Timestamp::from(since));
    let presence = Filter::new()
        .kind(Kind::from(KIND_PRESENCE))
        .authors(pks)
        .since(Timestamp::from(unix_now()));
    subscribe_live(client, url, presence, SUBSCRIPTION_LIVE_BOUND).await?;
    subscribe_live(client, url, mentions, SUBSCRIPTION_LIVE_BOUND).await?;
    Ok(WakeFeed { notes })
}

/// A live subscription to `filters`, as the same feed (issue 34: a
/// conversation's `log --follow`).
pub async fn subscribe_filters(
    client: &Client,
    url: &str,
    filters: Vec<Filter>,
) -> Result<WakeFeed, RelayError> {
    let notes = client.notifications();
    for f in filters {
        subscribe_live(client, url, f, SUBSCRIPTION_LIVE_BOUND).await?;
    }
    Ok(WakeFeed { notes })
}

impl WakeFeed {
    /// The next event, or `None` when `wait` passes or the client closed.
    pub async fn next(&mut self, wait: Duration) -> Option<Event> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match tokio::time::timeout_at(deadline, self.notes.recv()).await {
                Ok(Ok(RelayPoolNotification::Event { event, .. })) => return Some(*event),
                Ok(Ok(_)) | Ok(Err(RecvError::Lagged(_))) => {}
                Ok(Err(RecvError::Closed)) | Err(_) => return None,
            }
        }
    }
}

/// How long a presence subscription may take to go live before the caller
/// goes on anyway (a relay that never sends EOSE still gets its chance).
pub const SUBSCRIPTION_LIVE_BOUND: Duration = Duration::from_secs(5);

/// How often a subscription the relay closed is asked for again.
const SUBSCRIBE_ATTEMPTS: usize = 4;

/// Subscribes and waits until the relay confirms the subscription with its
/// EOSE (a NIP-42 relay sends it only after the authentication it asked
/// for), at most `bound` per attempt. A subscription the relay `CLOSED`
/// (`auth-required:` while the client was still authenticating) is asked
/// for again: the client library resubscribes closed subscriptions after
/// authenticating, but a `CLOSED` handled after that pass would leave the
/// subscription dead for good. After the last attempt or a silent relay the
/// caller goes on anyway (a relay that never sends EOSE still gets its chance).
async fn subscribe_live(
    client: &Client,
    url: &str,
    filter: Filter,
    bound: Duration,
) -> Result<(), RelayError> {
    for attempt in 1..=SUBSCRIBE_ATTEMPTS {
        let mut live = client.notifications();
        let id = client
            .subscribe(filter.clone(), None)
            .await
            .map_err(|e| RelayError::Connect {
                url: url.to_string(),
                message: e.to_string(),
            })?
            .val;
        match wait_live(&mut live, &id, bound).await {
            Live::Eose => return Ok(()),
            Live::Silent => {
                tracing::debug!(%url, "subscription not confirmed live; going on");
                return Ok(());
            }
            Live::Closed => {
                tracing::debug!(%url, attempt, "subscription closed by the relay; asking again");
                client.unsubscribe(&id).await;
                tokio::time::sleep(Duration::from_millis(50 * attempt as u64)).await;
            }
        }
    }
    Ok(())
}

/// What became of a subscription.
enum Live {
    Eose,
    Closed,
    Silent,
}

/// Waits for the relay's EOSE or CLOSED of subscription `id`, at most `bound`.
async fn wait_live(
    rx: &mut tokio::sync::broadcast::Receiver<RelayPoolNotification>,
    id: &SubscriptionId,
    bound: Duration,
) -> Live {
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Ok(RelayPoolNotification::Message {
                message: RelayMessage::EndOfStoredEvents(sub),
                ..
            })) if sub.as_ref() == id => return Live::Eose,
            Ok(Ok(RelayPoolNotification::Message {
                message: RelayMessage::Closed { subscription_id, .. },
                ..
            })) if subscription_id.as_ref() == id => return Live::Closed,
            Ok(Ok(_)) | Ok(Err(RecvError::Lagged(_))) => {}
            Ok(Err(RecvError::Closed)) | Err(_) => return Live::Silent,
        }
    }
}

impl PresenceFeed {
    /// Feeds `tracker` until `done` holds or `wait` passes; `on_change` sees
    /// every state change. Returns whether `done` was satisfied.
    pub async fn pump(
        &mut self,
        tracker: &mut Tracker,
        wait: Duration,
        on_change: &mut dyn FnMut(&Change, &Tracker),
        done: &dyn Fn(&Tracker) -> bool,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            for c in tracker.tick(unix_now()) {
                on_change(&c, tracker);
            }
            if done(tracker) {
                return true;
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            let step = left.min(Duration::from_millis(250));
            match tokio::time::timeout(step, self.notes.recv()).await {
                Err(_) | Ok(Err(RecvError::Lagged(_))) => {}
                Ok(Err(RecvError::Closed)) => return done(tracker),
                Ok(Ok(RelayPoolNotification::Event { event, .. })) => {
                    if event.kind != Kind::from(KIND_PRESENCE) {
                        continue;
                    }
                    let tag = |name: &str| {
                        event
                            .tags
                            .iter()
                            .find(|t| t.as_slice().first().map(String::as_str) == Some(name))
                            .and_then(|t| t.as_slice().get(1).cloned())
                    };
                    let tags = crate::presence::Tags::read(tag);
                    // The subject is event.pubkey, never a p tag (wire-facts §3).
                    let created_at = event.created_at.as_secs();
                    if let Some(c) = tracker.observe_tagged(
                        &event.pubkey.to_hex(),
                        &event.content,
                        tags,
                        created_at,
                        unix_now(),
                    ) {
                        on_change(&c, tracker);
                    }
                }
                Ok(Ok(_)) => {}
            }
        }
    }
}
