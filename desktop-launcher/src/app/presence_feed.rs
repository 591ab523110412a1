//! The presence feed (spec I3 "Presence is the status"; wire-facts §3): one
//! owner-authenticated subscription to kind 20001 per relay, for the
//! agents on it. `status` ([`super::status_watch`]) and the Start page's
//! live dots open it the same way; what they do with a report is theirs
//! (a [`Tracker`] decides the state, [`crate::presence`]).

use crate::record::AgentRecord;
use crate::relay::{self, PresenceFeed, RelayError};
use nostr_sdk::{Client, Keys};
use std::collections::BTreeMap;
use std::time::Duration;

/// One relay's presence subscription and the client it runs on.
pub struct Subscription {
    client: Client,
    feed: PresenceFeed,
}

impl Subscription {
    /// Connects to `url` as the owner (NIP-42 within `wait`) and subscribes
    /// to the presence of `authors` created at or after `since` (unix
    /// seconds). A subscription refused after the connect closes the client.
    pub async fn open(
        url: &str,
        owner: Keys,
        authors: &[String],
        since: u64,
        wait: Duration,
    ) -> Result<Subscription, RelayError> {
        let client = relay::connect(url, owner, wait).await?;
        match relay::subscribe_presence(&client, url, authors, since).await {
            Ok(feed) => Ok(Subscription { client, feed }),
            Err(e) => {
                client.shutdown().await;
                Err(e)
            }
        }
    }

    /// The reports as they come ([`PresenceFeed::pump`] feeds a [`Tracker`]).
    pub fn feed(&mut self) -> &mut PresenceFeed {
        &mut self.feed
    }

    /// Disconnects.
    pub async fn close(self) {
        self.client.shutdown().await;
    }
}

/// The agents' pubkeys grouped by relay URL: one subscription each.
pub fn by_relay<'a>(agents: impl IntoIterator<Item = (&'a str, &'a str)>) -> BTreeMap<String, Vec<String>> {
    let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (url, pubkey) in agents {
        m.entry(url.to_string()).or_default().push(pubkey.to_string());
    }
    m
}

/// [`by_relay`] of records.
pub fn records_by_relay(agents: &[AgentRecord]) -> BTreeMap<String, Vec<String>> {
    by_relay(agents.iter().map(|a| (a.relay_url.as_str(), a.pubkey.as_str())))
}
