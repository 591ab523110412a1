//! The relay boundary (spec M1, §Stop and Delete, I3; wire-facts §3, §4):
//! owner-signed `!shutdown`, chat mentions and the kind-20001 presence
//! subscription. The relay is the only channel to a running agent.

use crate::presence::{Change, Tracker};
use buzz_contract::presence::{KIND_CHANNEL_MESSAGE, KIND_PRESENCE, SHUTDOWN_COMMAND, TAG_RUN};
use nostr_sdk::prelude::*;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::broadcast::error::RecvError;

/// A relay failure. Names the relay, never a key.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("cannot connect to relay {url}: {message}")]
    Connect { url: String, message: String },
    #[error("relay {url} did not accept the event: {message}")]
    Publish { url: String, message: String },
    #[error("`{0}` is not a valid pubkey")]
    BadPubkey(String),
    #[error("no reply from the agent within {0:?}")]
    NoReply(Duration),
}

/// Unix seconds now.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A connected client signing as `keys` (the owner, for stop and chat).
pub async fn connect(url: &str, keys: Keys, timeout: Duration) -> Result<Client, RelayError> {
    let err = |m: String| RelayError::Connect {
        url: url.to_string(),
        message: m,
    };
    let client = Client::builder().signer(keys).build();
    client.add_relay(url).await.map_err(|e| err(e.to_string()))?;
    client
        .try_connect_relay(url, timeout)
        .await
        .map_err(|e| err(e.to_string()))?;
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

async fn publish(client: &Client, url: &str, builder: EventBuilder) -> Result<EventId, RelayError> {
    let out = client
        .send_event_builder(builder)
        .await
        .map_err(|e| RelayError::Publish {
            url: url.to_string(),
            message: e.to_string(),
        })?;
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

/// Sends a mention and waits for the agent's reply (a kind 9 by the agent
/// that references the mention in an `e` tag).
pub async fn chat(
    client: &Client,
    url: &str,
    agent_hex: &str,
    channel: Option<&str>,
    text: &str,
    wait: Duration,
) -> Result<String, RelayError> {
    let agent = pubkey(agent_hex)?;
    let mut notes = client.notifications();
    let sub = Filter::new()
        .kind(Kind::from(KIND_CHANNEL_MESSAGE))
        .author(agent)
        .since(Timestamp::from(unix_now().saturating_sub(5)));
    // The reply can come within milliseconds of the mention: the
    // subscription must be live before the mention goes out.
    subscribe_live(client, url, sub, SUBSCRIPTION_LIVE_BOUND).await?;
    let id = publish(client, url, kind9(text, &agent, channel)).await?;
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Err(RelayError::NoReply(wait));
        }
        match tokio::time::timeout(left, notes.recv()).await {
            Err(_) => return Err(RelayError::NoReply(wait)),
            Ok(Err(RecvError::Lagged(_))) => continue,
            Ok(Err(RecvError::Closed)) => return Err(RelayError::NoReply(wait)),
            Ok(Ok(RelayPoolNotification::Event { event, .. })) => {
                let refs = event.tags.event_ids().any(|e| *e == id);
                if event.pubkey == agent && event.kind == Kind::from(KIND_CHANNEL_MESSAGE) && refs {
                    return Ok(event.content.clone());
                }
            }
            Ok(Ok(_)) => {}
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
                    let run = event
                        .tags
                        .iter()
                        .find(|t| t.as_slice().first().map(String::as_str) == Some(TAG_RUN))
                        .and_then(|t| t.as_slice().get(1).cloned());
                    // The subject is event.pubkey, never a p tag (wire-facts §3).
                    let created_at = event.created_at.as_secs();
                    if let Some(c) = tracker.observe(
                        &event.pubkey.to_hex(),
                        &event.content,
                        run,
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
