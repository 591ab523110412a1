//! Two desktops that edit one agent at once (issue 52 item 4). Upstream's
//! relay keeps the newest head and nothing else: the older edit is lost
//! without a word (block/buzz#4893's neighbour). Here neither is applied
//! silently:
//!
//! - **Detected on write**: a desktop reads the relay's newest head before
//!   it writes its own ([`super::share`]). A head it has not seen, from
//!   another desktop, means both edited: it still writes its own (so the
//!   other desktop sees it), and records theirs as the conflict.
//! - **Detected on read**: `sync` ([`super::sync`]) finds a newer head that
//!   does not follow this desktop's, or one while this desktop has an edit
//!   not shared yet ([`crate::sync_plan::relation`]): it records it, and
//!   applies neither.
//! - **Shown**: [`conflict`] names the fields the two versions differ in
//!   (the secret env by name only), for `agent show`, `status` and the page.
//!   While it lasts, this desktop writes no head of the agent
//!   ([`super::share::Shared::Held`]).
//! - **Resolved** by the owner's pick ([`resolve`], `agent resolve NAME
//!   --keep mine|theirs`): the picked version becomes the record here and
//!   the next head on the relay, after both; every other desktop's `sync`
//!   takes it as the resolution and ends its conflict too.

use super::error::AppError;
use super::share::{self, Shared};
use crate::shared_record::{Materialized, materialize};
use crate::store::{Store, StoreError};
use buzz_contract::managed_record;
use serde::Serialize;
use std::collections::BTreeSet;

/// A conflict as it is shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Conflict {
    /// When the other desktop's version was written (unix seconds).
    pub theirs_at: u64,
    /// The fields the two versions differ in; a secret env entry by its
    /// name only (`secret env OPENAI_API_KEY`).
    pub differs: Vec<String>,
    /// What the owner runs to pick one.
    pub resolve: String,
}

/// Which version the owner keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    Mine,
    Theirs,
}

/// The conflict over agent `name`, if any.
pub fn conflict(store: &Store, name: &str) -> Result<Option<Conflict>, AppError> {
    let Some(theirs) = store.conflict_head(name)? else {
        return Ok(None);
    };
    let owner = store.owner()?;
    let m = opened(&theirs, &owner)?;
    let rec = store.agent(name)?;
    let mut differs = Vec::new();
    let (a, b) = (record_fields(&rec), record_fields(&m.record));
    for key in a.keys().chain(b.keys()).collect::<BTreeSet<_>>() {
        if a.get(key) != b.get(key) {
            differs.push(key.clone());
        }
    }
    let here = store.secret_env(name)?;
    for key in here.keys().chain(m.secret_env.keys()).collect::<BTreeSet<_>>() {
        if here.get(key) != m.secret_env.get(key) {
            differs.push(format!("secret env {key}"));
        }
    }
    if store.deploy_state(name)?.agent_id != m.agent_id {
        differs.push("deployment (agent_id)".into());
    }
    Ok(Some(Conflict {
        theirs_at: theirs.created_at.as_secs(),
        differs,
        resolve: format!("buzz-launcher agent resolve {name} --keep mine|theirs"),
    }))
}

/// The record's fields as shared: this machine's paths and bookkeeping left out.
fn record_fields(rec: &crate::record::AgentRecord) -> serde_json::Map<String, serde_json::Value> {
    let mut r = rec.clone();
    r.workdir = None;
    r.secret_env_revision = 0;
    if let crate::record::Backend::Provider { path_cache, .. } = &mut r.backend {
        *path_cache = None;
    }
    match serde_json::to_value(r) {
        Ok(serde_json::Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    }
}

fn opened(
    theirs: &nostr_sdk::prelude::Event,
    owner: &nostr_sdk::prelude::Keys,
) -> Result<Materialized, AppError> {
    let (_, p) = managed_record::open(theirs, owner).map_err(|e| AppError::Conflict(e.to_string()))?;
    materialize(&p).map_err(|e| AppError::Conflict(e.to_string()))
}

/// The owner's pick over agent `name`: `Theirs` takes the other desktop's
/// version here first; either way the version kept is written as the head
/// after both, and the conflict ends here.
pub fn resolve(store: &Store, name: &str, keep: Keep) -> Result<Shared, AppError> {
    let Some(theirs) = store.conflict_head(name)? else {
        return Err(AppError::Conflict(format!(
            "no conflict over `{name}` to resolve"
        )));
    };
    if keep == Keep::Theirs {
        let m = opened(&theirs, &store.owner()?)?;
        take(store, name, &m)?;
    }
    match share::publish_resolution(store, name, &theirs) {
        Shared::Failed(why) => Err(AppError::Conflict(format!(
            "the pick was not written ({why}); nothing changed on the relay: run it again"
        ))),
        done => Ok(done),
    }
}

/// Makes agent `name` here what `m` (another desktop's version) says: its
/// record, its secret env, its deployment; never its key, and this
/// machine's working directory and cached provider path stay.
pub(crate) fn take(store: &Store, name: &str, m: &Materialized) -> Result<(), StoreError> {
    let local = store.agent(name)?;
    let mut rec = m.record.clone();
    rec.name = local.name.clone();
    rec.pubkey = local.pubkey.clone();
    rec.workdir = local.workdir.clone();
    rec.secret_env_revision = local.secret_env_revision;
    if let (
        crate::record::Backend::Provider { id, path_cache, .. },
        crate::record::Backend::Provider {
            id: was,
            path_cache: kept,
            ..
        },
    ) = (&mut rec.backend, &local.backend)
        && id == was
    {
        *path_cache = kept.clone();
    }
    let mut changes: crate::envfile::EnvChanges =
        store.secret_env(name)?.into_keys().map(|k| (k, None)).collect();
    changes.extend(m.secret_env.iter().map(|(k, v)| (k.clone(), Some(v.clone()))));
    store.set_secret_env(&mut rec, &changes)?;
    store.save_agent(&rec)?;
    store.update_deploy_state(name, |s| s.agent_id = m.agent_id.clone())?;
    Ok(())
}
