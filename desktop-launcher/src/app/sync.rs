//! A desktop reads the owner's shared records back (issue 52 item 3):
//! `buzz-launcher init --import --relay URL` on a new machine, and
//! `buzz-launcher sync` any time after. It pages the owner's history of
//! kinds 5 and 30179 on each relay to exhaustion, bounded, before it
//! changes anything here, and then applies [`crate::sync_plan`]'s steps:
//!
//! - an agent this desktop does not have is filed: its key into `keys/`
//!   (0600), its auth tag, its secret env, its record, and the provider's
//!   `agent_id` (so `status`, `chat`, `stop`, `undeploy` and the waker work
//!   on the deployment the other desktop made);
//! - an agent whose newer head another desktop wrote is updated (its key
//!   never: an agent is never re-keyed); this desktop's working directory
//!   and cached provider path stay;
//! - an agent deleted on another desktop is deleted here (not undeployed:
//!   the deleting desktop did that), unless its local harness runs here;
//! - every deletion is remembered, so a deleted agent never comes back.
//!
//! Which relays: those named with `--relay` (remembered in `settings.json`
//! as `sync_relays`) and every agent's own. The bounds ([`MAX_PAGES`] of
//! [`PAGE`] events, [`MAX_BYTES`], [`SYNC_WAIT`]) are upstream's; a relay
//! that fails or hits one is named in the answer, and what the others
//! returned is applied.

use super::error::AppError;
use crate::relay;
use crate::store::Store;
use crate::sync_plan::{self, HeadInfo, Here, Step};
use buzz_contract::managed_record;
use nostr_sdk::prelude::{Event, EventId, Filter, Keys, Kind, Timestamp};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Events per page.
pub const PAGE: usize = 500;
/// Pages per relay.
pub const MAX_PAGES: usize = 200;
/// Serialized events per relay.
pub const MAX_BYTES: usize = 32 << 20;
/// One relay's whole read.
pub const SYNC_WAIT: Duration = Duration::from_secs(30);
/// One page's wait.
const PAGE_WAIT: Duration = Duration::from_secs(5);

/// What a sync read and did.
#[derive(Debug, Default)]
pub struct Synced {
    /// Each relay read, with the events it gave or why it could not.
    pub relays: Vec<(String, Result<usize, String>)>,
    pub created: Vec<String>,
    pub updated: Vec<String>,
    pub deleted: Vec<String>,
    /// Agents two desktops edited at once: neither version applied.
    pub conflicts: Vec<String>,
    /// Heads refused and agents not filed, one line each (never a secret).
    pub lines: Vec<String>,
}

/// Reads the owner's shared records from the relays this state dir knows
/// and `more`, and applies them (see the module doc).
pub async fn sync(store: &Store, more: &[String]) -> Result<Synced, AppError> {
    let owner = store.owner()?;
    let mut settings = store.settings()?;
    let known: BTreeSet<String> = settings.sync_relays.iter().cloned().collect();
    let added: Vec<&String> = more.iter().filter(|u| !known.contains(*u)).collect();
    if !added.is_empty() {
        settings.sync_relays.extend(added.into_iter().cloned());
        store.save_settings(&settings)?;
    }
    let mut relays: BTreeSet<String> = settings.sync_relays.iter().cloned().collect();
    relays.extend(store.agents()?.into_iter().map(|r| r.relay_url));
    let mut out = Synced::default();
    let mut events: BTreeMap<EventId, Event> = BTreeMap::new();
    for url in relays {
        let read = read_all(&url, &owner).await;
        out.relays
            .push((url, read.as_ref().map(Vec::len).map_err(Clone::clone)));
        events.extend(read.unwrap_or_default().into_iter().map(|e| (e.id, e)));
    }
    let fetched: Vec<Event> = events.into_values().collect();
    apply(store, &owner, &fetched, &mut out)?;
    Ok(out)
}

/// Applies what `fetched` says to this state dir.
fn apply(store: &Store, owner: &Keys, fetched: &[Event], out: &mut Synced) -> Result<(), AppError> {
    let mut here = Vec::new();
    for rec in store.agents()? {
        let head = store.record_head(&rec.name)?.as_ref().and_then(HeadInfo::of);
        let theirs = store.conflict_head(&rec.name)?.as_ref().and_then(HeadInfo::of);
        let unshared = super::share::Mine::load(store, &rec.name).is_ok_and(|m| m.unshared());
        here.push(Here {
            name: rec.name,
            pubkey: rec.pubkey,
            head,
            theirs,
            unshared,
        });
    }
    let plan = sync_plan::decide(owner, fetched, &here, &store.tombstones()?);
    out.lines.extend(plan.refused.iter().cloned());
    for step in plan.steps {
        // A Start, a stop, an undeploy or a wake of the agent holds its
        // lock while it reads and changes it: such an agent waits for the
        // next sync.
        let _held = match &step {
            Step::Update { name, .. } | Step::Delete { name, .. } | Step::Conflict { name, .. } => {
                match crate::lock::try_lock(&super::agent::agent_lock(store, name))? {
                    Some(held) => Some(held),
                    None => {
                        out.lines.push(format!("`{name}` is busy here (a start, a stop or a wake): the next sync takes its change"));
                        continue;
                    }
                }
            }
            _ => None,
        };
        match step {
            Step::Create { head, agent } => match store.import_agent(&agent) {
                Ok(rec) => {
                    store.update_deploy_state(&rec.name, |s| s.agent_id = agent.agent_id.clone())?;
                    store.save_record_head(&rec.name, &head)?;
                    out.created.push(rec.name);
                }
                Err(e) => out.lines.push(format!("the shared agent `{}` was not filed: {e}", agent.record.name)),
            },
            Step::Update {
                name,
                head,
                agent,
                resolves,
            } => {
                super::conflict::take(store, &name, &agent)?;
                store.save_record_head(&name, &head)?;
                if resolves {
                    store.clear_conflict_head(&name)?;
                    out.lines.push(format!("`{name}`: the conflict is resolved by the owner's pick on another desktop"));
                }
                out.updated.push(name);
            }
            Step::Conflict { name, head } => {
                store.save_conflict_head(&name, &head)?;
                out.lines.push(format!(
                    "`{name}` was edited on another desktop at the same time as here: neither version is applied; `buzz-launcher agent show {name}` shows both, `buzz-launcher agent resolve {name} --keep mine|theirs` picks one"
                ));
                out.conflicts.push(name);
            }
            Step::Delete { name, .. } => {
                let state = store.deploy_state(&name)?;
                if let Some(r) = crate::local::running_from(&name, &state) {
                    out.lines.push(format!(
                        "`{name}` was deleted on another desktop, but its local harness runs here ({r:?}): stop it, then sync again"
                    ));
                    continue;
                }
                store.delete_agent(&name)?;
                out.deleted.push(name);
            }
            Step::NameTaken { name, pubkey } => out.lines.push(format!(
                "the shared agent `{name}` ({pubkey}) was not filed: an agent of that name with another key is here; rename one of them"
            )),
        }
    }
    store.add_tombstones(&plan.deleted)?;
    Ok(())
}

/// The owner's kinds 5 and 30179 on `url`, newest first, paged to
/// exhaustion within the bounds.
async fn read_all(url: &str, owner: &Keys) -> Result<Vec<Event>, String> {
    let started = Instant::now();
    let client = relay::connect(url, owner.clone(), PAGE_WAIT)
        .await
        .map_err(|e| e.to_string())?;
    let mut seen: BTreeMap<EventId, Event> = BTreeMap::new();
    let (mut until, mut bytes, mut pages) = (None::<Timestamp>, 0usize, 0usize);
    let result = loop {
        if pages >= MAX_PAGES || bytes > MAX_BYTES || started.elapsed() > SYNC_WAIT {
            break Err(format!(
                "stopped at a bound (at most {MAX_PAGES} pages of {PAGE}, {} MiB, {} s)",
                MAX_BYTES >> 20,
                SYNC_WAIT.as_secs()
            ));
        }
        let mut filter = Filter::new()
            .kinds([Kind::EventDeletion, Kind::from(managed_record::KIND)])
            .author(owner.public_key())
            .limit(PAGE);
        if let Some(u) = until {
            filter = filter.until(u);
        }
        let page = match client.fetch_events(filter, PAGE_WAIT).await {
            Ok(p) => p,
            Err(e) => break Err(e.to_string()),
        };
        pages += 1;
        let before = seen.len();
        let full = page.len() >= PAGE;
        let mut oldest = until;
        for e in page {
            bytes += e.content.len() + 512;
            oldest = Some(oldest.map_or(e.created_at, |o| o.min(e.created_at)));
            seen.insert(e.id, e);
        }
        // A short page, or one with nothing new (its oldest second again): done.
        if !full || seen.len() == before {
            break Ok(());
        }
        until = oldest;
    };
    client.shutdown().await;
    result.map(|()| seen.into_values().collect())
}
