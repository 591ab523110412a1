//! An agent's conversation from its relay (issue 34 item 2): every kind-9
//! message that mentions the agent and every one the agent wrote, for the
//! CLI's `log [--follow]` and the page's conversation view;
//! [`crate::conversation_view`] groups them by turn and writes them.
//!
//! The relay is the record: what the agent answered before a restart, an
//! idle stop or a new pod is there as it is now, so the history needs
//! nothing the harness keeps. Texts are made safe for a terminal (a
//! stranger's mention may carry escape codes); the agent's own were
//! scrubbed of secrets before it published them.

use super::error::AppError;
use crate::conversation_view::{Said, Who};
use crate::relay::{self, WakeFeed};
use crate::response::sanitize_text;
use crate::store::Store;
use buzz_contract::presence::KIND_CHANNEL_MESSAGE;
use nostr_sdk::prelude::{Client, Event, Filter, Kind, PublicKey, Timestamp};
use std::time::Duration;

/// The most messages of each side asked for in one look.
pub const LOG_LIMIT: usize = 2000;
/// How long the relay has to answer.
pub const LOG_WAIT: Duration = Duration::from_secs(10);

/// Who wrote `e`, for an agent `agent` of owner `owner`.
fn said(e: &Event, owner: &PublicKey, agent: &PublicKey) -> Said {
    let who = if e.pubkey == *agent {
        Who::Agent
    } else if e.pubkey == *owner {
        Who::Owner
    } else {
        Who::Other(e.pubkey.to_hex())
    };
    let reply_to = e
        .tags
        .iter()
        .map(|t| t.as_slice())
        .find(|t| t.len() >= 2 && t[0] == "e")
        .map(|t| t[1].clone());
    Said {
        id: e.id.to_hex(),
        who,
        at: e.created_at.as_secs(),
        text: sanitize_text(&e.content),
        reply_to,
    }
}

fn filters(agent: PublicKey, since: u64) -> Vec<Filter> {
    let base = Filter::new()
        .kind(Kind::from(KIND_CHANNEL_MESSAGE))
        .since(Timestamp::from_secs(since));
    vec![
        base.clone().author(agent).limit(LOG_LIMIT),
        base.pubkey(agent).limit(LOG_LIMIT),
    ]
}

struct Parties {
    client: Client,
    url: String,
    owner: PublicKey,
    agent: PublicKey,
}

async fn parties(store: &Store, name: &str) -> Result<Parties, AppError> {
    let rec = store.agent(name)?;
    let owner = store.owner()?;
    let agent =
        PublicKey::from_hex(&rec.pubkey).map_err(|_| relay::RelayError::BadPubkey(rec.pubkey.clone()))?;
    let client = relay::connect(&rec.relay_url, owner.clone(), LOG_WAIT).await?;
    Ok(Parties {
        client,
        url: rec.relay_url,
        owner: owner.public_key(),
        agent,
    })
}

/// Agent `name`'s conversation since `since` (unix seconds), as the relay
/// holds it.
pub async fn conversation(store: &Store, name: &str, since: u64) -> Result<Vec<Said>, AppError> {
    let p = parties(store, name).await?;
    // Both sides at once: one round trip, not two.
    let looks = filters(p.agent, since)
        .into_iter()
        .map(|f| p.client.fetch_events(f, LOG_WAIT));
    let got = futures::future::join_all(looks).await;
    p.client.shutdown().await;
    let mut out = Vec::new();
    for g in got {
        let events = g.map_err(|e| relay::RelayError::Connect {
            url: p.url.clone(),
            message: e.to_string(),
        })?;
        out.extend(events.iter().map(|e| said(e, &p.owner, &p.agent)));
    }
    Ok(out)
}

/// The conversation's new messages as they come (`log --follow`).
pub struct Following {
    feed: WakeFeed,
    client: Client,
    owner: PublicKey,
    agent: PublicKey,
}

/// Follows agent `name`'s conversation from `since` on.
pub async fn follow(store: &Store, name: &str, since: u64) -> Result<Following, AppError> {
    let p = parties(store, name).await?;
    let feed = relay::subscribe_filters(&p.client, &p.url, filters(p.agent, since)).await?;
    Ok(Following {
        feed,
        client: p.client,
        owner: p.owner,
        agent: p.agent,
    })
}

impl Following {
    /// The next message, or `None` when `wait` passes or the relay closed.
    pub async fn next(&mut self, wait: Duration) -> Option<Said> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let e = self.feed.next(left).await?;
            if e.kind == Kind::from(KIND_CHANNEL_MESSAGE)
                && (e.pubkey == self.agent || e.tags.public_keys().any(|p| *p == self.agent))
            {
                return Some(said(&e, &self.owner, &self.agent));
            }
        }
    }

    /// Closes the connection.
    pub async fn close(self) {
        self.client.shutdown().await;
    }
}
