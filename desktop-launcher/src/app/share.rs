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
//! - **Read before write.** The relay's newest head is read first: one of
//!   another desktop's that this one has not seen means both edited the
//!   agent ([`super::conflict`]); this desktop's head is written all the
//!   same, and the other recorded as the conflict ([`Shared::Conflict`]).
//!   While a conflict lasts nothing is written ([`Shared::Held`]).
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
    /// Written beside another desktop's head from the same past: a
    /// conflict, recorded here and visible there, until the owner picks one
    /// ([`super::conflict`]).
    Conflict,
    /// Not written: a conflict over this agent waits for the owner's pick.
    Held,
}

impl Shared {
    /// What a front end tells of it: only a failure is news.
    pub fn note(&self) -> Option<String> {
        match self {
            Shared::Failed(why) => Some(format!(
                "the record is not shared with your other desktops yet ({why}); its next change shares it"
            )),
            Shared::Conflict | Shared::Held => Some(
                "another desktop edited this agent at the same time: `buzz-launcher agent show <name>` shows both, \
                 `buzz-launcher agent resolve <name> --keep mine|theirs` picks one (until then neither is applied here or there)"
                    .into(),
            ),
            _ => None,
        }
    }
}

/// Whether sharing is off (`BUZZ_LAUNCHER_SHARE_RECORDS=0`): nothing is
/// written, and the waker reads nothing either.
pub(crate) fn is_off() -> bool {
    off()
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

/// [`share`] from async code (a local start, once online).
pub(crate) async fn share_now(store: &Store, name: &str) -> Shared {
    if off() {
        return Shared::Off;
    }
    match tokio::time::timeout(SHARE_WAIT, publish(store, name)).await {
        Ok(done) => done.unwrap_or_else(Shared::Failed),
        Err(_) => Shared::Failed(format!(
            "the relay did not take it within {} s",
            SHARE_WAIT.as_secs()
        )),
    }
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

/// This desktop's side of an agent: its record, secrets, deployment and
/// last head.
pub(crate) struct Mine {
    pub rec: AgentRecord,
    identity: crate::record::Identity,
    agent_id: Option<String>,
    pub owner: Keys,
    agent: Keys,
    pub head: Option<(Event, Payload)>,
}

impl Mine {
    pub(crate) fn load(store: &Store, name: &str) -> Result<Mine, String> {
        let text = |e: crate::store::StoreError| e.to_string();
        let rec = store.agent(name).map_err(text)?;
        let identity = store.identity(name).map_err(text)?;
        let agent_id = store.deploy_state(name).map_err(text)?.agent_id;
        let owner = store.owner().map_err(text)?;
        let agent = buzz_contract::keys::parse_private_key(&identity.nsec).map_err(|e| e.to_string())?;
        let head = store
            .record_head(name)
            .map_err(text)?
            .and_then(|e| managed_record::open(&e, &owner).ok().map(|(_, p)| (e, p)));
        Ok(Mine {
            rec,
            identity,
            agent_id,
            owner,
            agent,
            head,
        })
    }

    /// The body this desktop would write now, on `base` (else its head).
    pub(crate) fn body(&self, base: Option<&Payload>, now: u64) -> Payload {
        let local = Local {
            record: &self.rec,
            identity: &self.identity,
            agent_id: self.agent_id.as_deref(),
        };
        let base = base.or(self.head.as_ref().map(|(_, p)| p));
        shared_record::body(&local, &self.owner.public_key(), &self.agent, base, now)
    }

    /// Edited here since its last head.
    pub(crate) fn unshared(&self) -> bool {
        self.head
            .as_ref()
            .is_none_or(|(_, p)| !p.same_body(&self.body(None, relay::unix_now())))
    }
}

async fn publish(store: &Store, name: &str) -> Result<Shared, String> {
    let text = |e: crate::store::StoreError| e.to_string();
    if store.conflict_head(name).map_err(text)?.is_some() {
        return Ok(Shared::Held);
    }
    let mine = Mine::load(store, name)?;
    let now = relay::unix_now();
    let body = mine.body(None, now);
    let (payload, at) = match &mine.head {
        Some((_, p)) if p.same_body(&body) => return Ok(Shared::Unchanged),
        Some((e, p)) => (
            shared_record::successor(body, &e.id, p),
            now.max(e.created_at.as_secs() + 1),
        ),
        None => (body, now),
    };
    let client = relay::connect(&mine.rec.relay_url, mine.owner.clone(), SHARE_WAIT)
        .await
        .map_err(|e| e.to_string())?;
    // Read before writing: a head of another desktop's that this one has
    // not seen means both edited the agent.
    let current = current_head(&client, &mine.owner, &mine.rec.pubkey).await;
    let beside = current.filter(|c| {
        mine.head
            .as_ref()
            .is_none_or(|(e, _)| c.id != e.id && c.created_at >= e.created_at)
    });
    let at = beside.as_ref().map_or(at, |c| at.max(c.created_at.as_secs() + 1));
    let event = managed_record::seal(&mine.owner, &payload, at).map_err(|e| e.to_string())?;
    let sent = published(&client, &mine.rec.relay_url, &event).await;
    client.shutdown().await;
    sent?;
    store.save_record_head(name, &event).map_err(text)?;
    if let Some(theirs) = beside {
        store.save_conflict_head(name, &theirs).map_err(text)?;
        return Ok(Shared::Conflict);
    }
    Ok(Shared::Written {
        generation: payload.generation,
    })
}

/// The relay's newest head of agent `agent` (hex) by `owner` that opens.
pub(crate) async fn current_head(client: &nostr_sdk::Client, owner: &Keys, agent: &str) -> Option<Event> {
    let filter = nostr_sdk::prelude::Filter::new()
        .kind(Kind::from(managed_record::KIND))
        .author(owner.public_key())
        .identifier(agent)
        .limit(1);
    let got = client.fetch_events(filter, SHARE_WAIT).await.ok()?;
    got.into_iter()
        .filter(|e| managed_record::open(e, owner).is_ok())
        .max_by_key(|e| e.created_at)
}

/// Writes the owner's pick of a conflict over `name`: this desktop's
/// record as it is now (after [`super::conflict::resolve`] took the side
/// picked), as the head after both sides and the relay's newest, then the
/// conflict ends here.
pub(crate) fn publish_resolution(store: &Store, name: &str, theirs: &Event) -> Shared {
    let (store, name, theirs) = (store.clone(), name.to_string(), theirs.clone());
    bounded(async move {
        resolution(&store, &name, &theirs)
            .await
            .unwrap_or_else(Shared::Failed)
    })
}

async fn resolution(store: &Store, name: &str, theirs: &Event) -> Result<Shared, String> {
    let text = |e: crate::store::StoreError| e.to_string();
    let mine = Mine::load(store, name)?;
    let (_, their_payload) = managed_record::open(theirs, &mine.owner).map_err(|e| e.to_string())?;
    let client = relay::connect(&mine.rec.relay_url, mine.owner.clone(), SHARE_WAIT)
        .await
        .map_err(|e| e.to_string())?;
    let current = current_head(&client, &mine.owner, &mine.rec.pubkey).await;
    // After every head known: mine, theirs, the relay's newest.
    let known: Vec<&Event> = [mine.head.as_ref().map(|(e, _)| e), Some(theirs), current.as_ref()]
        .into_iter()
        .flatten()
        .collect();
    let after = known
        .iter()
        .max_by_key(|e| e.created_at)
        .copied()
        .unwrap_or(theirs);
    let generation = known
        .iter()
        .filter_map(|e| crate::sync_plan::HeadInfo::of(e))
        .map(|h| h.generation)
        .max()
        .unwrap_or(1);
    let now = relay::unix_now();
    let mut payload = mine.body(Some(&their_payload), now);
    payload.generation = generation + 1;
    payload.previous_event_id = Some(after.id.to_hex());
    let at = now.max(after.created_at.as_secs() + 1);
    let event = managed_record::seal(&mine.owner, &payload, at).map_err(|e| e.to_string())?;
    let sent = published(&client, &mine.rec.relay_url, &event).await;
    client.shutdown().await;
    sent?;
    store.save_record_head(name, &event).map_err(text)?;
    store.clear_conflict_head(name).map_err(text)?;
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
    let sent = published(&client, url, event).await;
    client.shutdown().await;
    sent
}

/// Publishes `event`, failing soon when the relay will not take the
/// owner's login: a relay of another owner answers `OK false restricted:`,
/// or keeps answering `auth-required:` after the client authenticated (it
/// would otherwise retry until [`SHARE_WAIT`]). [`AUTH_GRACE`] covers the
/// honest race of an event sent before the login completed.
async fn published(client: &nostr_sdk::Client, url: &str, event: &Event) -> Result<(), String> {
    use nostr_sdk::{RelayMessage, RelayPoolNotification};
    use tokio::sync::broadcast::error::RecvError;
    let mut notes = client.notifications();
    let send = relay::publish_event(client, url, event);
    tokio::pin!(send);
    let refused = |m: &str| format!("{url} did not take the owner's login ({m})");
    let mut grace: Option<(tokio::time::Instant, String)> = None;
    loop {
        let until = grace.as_ref().map(|(at, _)| *at);
        tokio::select! {
            sent = &mut send => return sent.map(|_| ()).map_err(|e| e.to_string()),
            () = sleep_until_opt(until) => {
                return Err(refused(&grace.map(|(_, m)| m).unwrap_or_default()));
            }
            note = notes.recv() => match note {
                Ok(RelayPoolNotification::Message {
                    message: RelayMessage::Ok { status: false, message, .. },
                    ..
                }) if message.starts_with("restricted") => return Err(refused(&message)),
                Ok(RelayPoolNotification::Message {
                    message: RelayMessage::Ok { event_id, status: false, message },
                    ..
                }) if event_id == event.id && message.starts_with("auth-required") && grace.is_none() => {
                    grace = Some((tokio::time::Instant::now() + AUTH_GRACE, message.to_string()));
                }
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return (&mut send).await.map(|_| ()).map_err(|e| e.to_string()),
            },
        }
    }
}

/// How long an `auth-required:` answer may take to turn into a login.
const AUTH_GRACE: Duration = Duration::from_millis(1500);

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
