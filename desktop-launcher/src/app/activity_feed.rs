//! The agents' live activity (issue 34 item 2): their observer frames
//! (kind 24200, on when the harness runs with `BUZZ_ACP_RELAY_OBSERVER`)
//! from their relays, opened with the owner's key and folded into each
//! agent's [`Activity`] for `status --watch` and the page.
//!
//! Frames are ephemeral: a relay forwards them to the subscriptions live
//! when they are sealed and keeps none, so activity starts when the watch
//! does. A frame that does not open for the owner, or whose author is not
//! one of the watched agents, is ignored.

use super::error::AppError;
use crate::activity::Activity;
use crate::record::AgentRecord;
use crate::relay::{self, WakeFeed};
use crate::store::Store;
use buzz_contract::observer::{self, Frame};
use nostr_sdk::prelude::{
    Alphabet, Client, Event, Filter, Keys, Kind, PublicKey, SingleLetterTag, Timestamp, nip44,
};
use std::collections::BTreeMap;
use std::time::Duration;

/// The frame `e` carries, opened with the owner's key.
pub fn open(owner: &Keys, e: &Event) -> Option<Frame> {
    let plain = nip44::decrypt(owner.secret_key(), &e.pubkey, &e.content).ok()?;
    serde_json::from_str(&plain).ok()
}

/// Every watched agent's activity, live.
pub struct ActivityWatch {
    feeds: Vec<(Client, WakeFeed)>,
    owner: Keys,
    /// pubkey hex → name.
    names: BTreeMap<String, String>,
    /// name → activity.
    pub activity: BTreeMap<String, Activity>,
    /// Relays that could not be watched, and why.
    pub unreachable: Vec<String>,
}

/// Subscribes to the frames of `agents` on their relays, from now on. A
/// relay that cannot be reached is named in
/// [`ActivityWatch::unreachable`]; the others are watched.
pub async fn watch(store: &Store, agents: &[AgentRecord]) -> Result<ActivityWatch, AppError> {
    let owner = store.owner()?;
    let mut by_relay: BTreeMap<&str, Vec<PublicKey>> = BTreeMap::new();
    for a in agents {
        if let Ok(pk) = PublicKey::from_hex(&a.pubkey) {
            by_relay.entry(a.relay_url.as_str()).or_default().push(pk);
        }
    }
    let mut feeds = Vec::new();
    let mut unreachable = Vec::new();
    for (url, authors) in by_relay {
        let filter = Filter::new()
            .kind(Kind::from(observer::KIND))
            .authors(authors)
            .custom_tag(
                SingleLetterTag::lowercase(Alphabet::P),
                owner.public_key().to_hex(),
            )
            .since(Timestamp::from_secs(relay::unix_now()));
        let client = match relay::connect(url, owner.clone(), Duration::from_secs(10)).await {
            Ok(c) => c,
            Err(e) => {
                unreachable.push(e.to_string());
                continue;
            }
        };
        match relay::subscribe_filters(&client, url, vec![filter]).await {
            Ok(feed) => feeds.push((client, feed)),
            Err(e) => {
                client.shutdown().await;
                unreachable.push(e.to_string());
            }
        }
    }
    Ok(ActivityWatch {
        feeds,
        owner,
        names: agents
            .iter()
            .map(|a| (a.pubkey.clone(), a.name.clone()))
            .collect(),
        activity: BTreeMap::new(),
        unreachable,
    })
}

impl ActivityWatch {
    /// How many relays are watched.
    pub fn watching(&self) -> usize {
        self.feeds.len()
    }

    /// Waits up to `wait` for the next frame of any agent; folds it in and
    /// returns the agent's name.
    pub async fn next(&mut self, wait: Duration) -> Option<String> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() || self.feeds.is_empty() {
                return None;
            }
            let nexts = self.feeds.iter_mut().map(|(_, f)| Box::pin(f.next(left)));
            let (got, _, _) = futures::future::select_all(nexts).await;
            let e = got?;
            if e.kind != Kind::from(observer::KIND) {
                continue;
            }
            let Some(name) = self.names.get(&e.pubkey.to_hex()).cloned() else {
                continue;
            };
            let Some(frame) = open(&self.owner, &e) else {
                continue;
            };
            self.activity
                .entry(name.clone())
                .or_default()
                .apply(&frame, e.created_at.as_secs());
            return Some(name);
        }
    }

    /// Closes the connections.
    pub async fn close(self) {
        for (c, _) in self.feeds {
            c.shutdown().await;
        }
    }
}
