//! Sharing each agent's record with the owner's other desktops (issue 52
//! item 2): every create, edit, deploy and undeploy writes the agent's
//! private head (kind 30179, [`crate::shared_record`]) to the agent's relay,
//! signed by the owner and sealed to the owner; a delete writes the NIP-09
//! kind 5 that names its coordinate.
//!
//! - **Only a change is written.** The head follows the last one this
//!   desktop wrote ([`Store::record_head`]): `g` + 1, `prev` its id, a
//!   `created_at` after its own (two edits in one second still replace each
//!   other in order). When the body says nothing new ([`Payload::same_body`];
//!   NIP-44 is randomized, ciphertexts never compare), nothing is written.
//! - **Never in the way.** Sharing is bounded ([`SHARE_WAIT`]) and a failure
//!   is told, never an error of the operation: the record is saved, the
//!   agent deploys. The head is kept only once the relay accepted it, so
//!   the next change of the agent shares everything it missed.
//! - **What a relay sees.** The embedded relay serves the head only to its
//!   author, the owner (`buzz_relay::author_only`). A relay that serves it
//!   to anyone (nostr-rs-relay) shows its existence, its tags (the agent's
//!   pubkey, the generation, the predecessor) and the owner's pubkey; the
//!   content, with the key and the secret env, is NIP-44 to the owner
//!   (docs/launcher.md "Every desktop of the owner").
//! - **The embedded relay at rest.** An agent on this state dir's embedded
//!   relay, created while it does not run, is shared at its first start
//!   (which starts the relay), not failed noisily at its create.
//! - **Off switch.** `BUZZ_LAUNCHER_SHARE_RECORDS=0` shares nothing.
//!
//! The front ends see a [`Shared`]; [`Shared::note`] is what to tell.

use crate::limits::SHARE_ENV;
use crate::record::AgentRecord;
use crate::relay;
use crate::shared_record::{self, Local};
use crate::store::Store;
use buzz_contract::managed_record::{self, Payload};
use nostr_sdk::prelude::{Event, EventBuilder, Keys, Kind, Tag, Timestamp};
use std::future::Future;
use std::time::Duration;

/// How long one share may take, connecting included.
pub const SHARE_WAIT: Duration = Duration::from_secs(5);

/// What became of a share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shared {
    /// The relay has this record already.
    Unchanged,
    /// A new head, at this generation.
    Written { generation: u64 },
    /// A deletion (kind 5) was written.
    Deleted,
    /// `BUZZ_LAUNCHER_SHARE_RECORDS=0`.
    Off,
    /// The agent's relay is this state dir's embedded relay, which is not
    /// running: the agent's next start (which starts it) shares it.
    Later,
    /// Not shared this time, and why; the agent's next change shares it.
    Failed(String),
}

impl Shared {
    /// What a front end tells of it: only a failure is news.
    pub fn note(&self) -> Option<String> {
        match self {
            Shared::Failed(why) => Some(format!(
                "the record is not shared with your other desktops yet ({why}); its next change shares it"
            )),
            _ => None,
        }
    }
}

fn off() -> bool {
    std::env::var(SHARE_ENV).is_ok_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "0" | "false" | "no" | "off"
        )
    })
}

/// Shares agent `name`'s record, waiting at most [`SHARE_WAIT`].
pub(crate) fn share(store: &Store, name: &str) -> Shared {
    if off() {
        return Shared::Off;
    }
    if embedded_at_rest(store, name) {
        return Shared::Later;
    }
    let (store, name) = (store.clone(), name.to_string());
    bounded(async move { publish(&store, &name).await.unwrap_or_else(Shared::Failed) })
}

/// Shares that agent `rec` is deleted, before its record and key go.
pub(crate) fn share_deletion(store: &Store, rec: &AgentRecord) -> Shared {
    if off() {
        return Shared::Off;
    }
    let (store, rec) = (store.clone(), rec.clone());
    bounded(async move { delete(&store, &rec).await.unwrap_or_else(Shared::Failed) })
}

/// Whether agent `name`'s relay is this state dir's embedded relay and it
/// does not run (nobody can read the record there now, and a fresh
/// state dir's first `agent create` would otherwise fail to share).
fn embedded_at_rest(store: &Store, name: &str) -> bool {
    let Ok(rec) = store.agent(name) else { return false };
    crate::embedded::is_embedded(store, &rec.relay_url).unwrap_or(false)
        && crate::embedded::running(store).is_ok_and(|r| r.is_none())
}

/// Runs `f` on a runtime of its own, on a thread of its own (the callers
/// are sync, and some run inside another runtime), for [`SHARE_WAIT`].
fn bounded(f: impl Future<Output = Shared> + Send + 'static) -> Shared {
    let ran = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Shared::Failed(format!("no runtime: {e}")))?;
        rt.block_on(async { tokio::time::timeout(SHARE_WAIT, f).await })
            .map_err(|_| {
                Shared::Failed(format!(
                    "the relay did not take it within {} s",
                    SHARE_WAIT.as_secs()
                ))
            })
    })
    .join();
    match ran {
        Ok(Ok(s)) | Ok(Err(s)) => s,
        Err(_) => Shared::Failed("the share panicked".into()),
    }
}

async fn publish(store: &Store, name: &str) -> Result<Shared, String> {
    let text = |e: crate::store::StoreError| e.to_string();
    let rec = store.agent(name).map_err(text)?;
    let identity = store.identity(name).map_err(text)?;
    let state = store.deploy_state(name).map_err(text)?;
    let owner = store.owner().map_err(text)?;
    let agent = buzz_contract::keys::parse_private_key(&identity.nsec).map_err(|e| e.to_string())?;
    let head: Option<(Event, Payload)> = store
        .record_head(name)
        .map_err(text)?
        .and_then(|e| managed_record::open(&e, &owner).ok().map(|(_, p)| (e, p)));
    let now = relay::unix_now();
    let local = Local {
        record: &rec,
        identity: &identity,
        agent_id: state.agent_id.as_deref(),
    };
    let body = shared_record::body(
        &local,
        &owner.public_key(),
        &agent,
        head.as_ref().map(|(_, p)| p),
        now,
    );
    let (payload, at) = match &head {
        Some((_, p)) if p.same_body(&body) => return Ok(Shared::Unchanged),
        Some((e, p)) => (
            shared_record::successor(body, &e.id, p),
            now.max(e.created_at.as_secs() + 1),
        ),
        None => (body, now),
    };
    let event = managed_record::seal(&owner, &payload, at).map_err(|e| e.to_string())?;
    send(&rec.relay_url, owner, &event).await?;
    store.save_record_head(name, &event).map_err(text)?;
    Ok(Shared::Written {
        generation: payload.generation,
    })
}

async fn delete(store: &Store, rec: &AgentRecord) -> Result<Shared, String> {
    let owner = store.owner().map_err(|e| e.to_string())?;
    let agent = nostr_sdk::prelude::PublicKey::from_hex(&rec.pubkey).map_err(|e| e.to_string())?;
    let head_at = store
        .record_head(&rec.name)
        .ok()
        .flatten()
        .map_or(0, |e| e.created_at.as_secs());
    let coordinate = managed_record::coordinate(&owner.public_key(), &agent);
    let tags =
        [["a", coordinate.as_str()], ["k", "30179"]].map(|t| Tag::parse(t).expect("two-value tags parse"));
    let event = EventBuilder::new(Kind::EventDeletion, "")
        .tags(tags)
        .custom_created_at(Timestamp::from_secs(relay::unix_now().max(head_at)))
        .sign_with_keys(&owner)
        .map_err(|e| e.to_string())?;
    send(&rec.relay_url, owner, &event).await?;
    Ok(Shared::Deleted)
}

async fn send(url: &str, owner: Keys, event: &Event) -> Result<(), String> {
    let client = relay::connect(url, owner, SHARE_WAIT)
        .await
        .map_err(|e| e.to_string())?;
    let sent = relay::publish_event(&client, url, event).await;
    client.shutdown().await;
    sent.map(|_| ()).map_err(|e| e.to_string())
}
