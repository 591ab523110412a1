//! Creating and editing an agent record, for every front end (issue 31
//! item 1; spec §Launch data, I2). The CLI (`agent create|edit`) and the
//! Start page (`POST /api/agents`, `PUT /api/agents/<name>`) each turn their
//! own input into a fill: a function that applies the fields to a record,
//! refusing a bad one in the front end's own error type, and names the
//! secret env changes. The order of a save is here, once:
//!
//! 1. the fill runs on a scratch record, and the fields that name files or are
//!    listed are checked for a key's shape or this state dir's key material
//!    ([`crate::shown`], [`Store::refuse_secret`]): a refusal creates nothing;
//! 2. the record is created (key, auth tag), the fill applied to it, the
//!    secret env written (`keys/<name>.env`), the record saved; a failure
//!    deletes what the create made;
//! 3. the record is shared with the owner's other desktops ([`super::share`]:
//!    bounded, never a failure of the save);
//! 4. the answer carries the warnings ([`crate::presets::warnings`], on this
//!    process's `PATH` and environment, which a local harness inherits) and,
//!    for an edit of a running agent, that the edit applies after its next
//!    restart.

use super::share::{self, Shared};
use crate::embedded::{self, EmbeddedError};
use crate::envfile::EnvChanges;
use crate::record::AgentRecord;
use crate::store::{Store, StoreError};

/// A saved record and what to tell the user about it.
#[derive(Debug, Clone)]
pub struct Saved {
    pub record: AgentRecord,
    /// Never a value: a key env no layer sets, a binary a local harness would not find.
    pub warnings: Vec<String>,
    /// The agent runs a launch of the record before this edit.
    pub applies_after_restart: bool,
    /// The record shared with the owner's other desktops ([`super::share`]).
    pub shared: Shared,
}

/// A refused save. `E` is the front end's own field error.
#[derive(Debug)]
pub enum SaveError<E> {
    /// The fill refused its input.
    Fields(E),
    /// Fields that would show a key, each with its form key (`name`,
    /// `relay_url`, `display_name`, `backend`) and the refusal.
    Shown(Vec<(&'static str, StoreError)>),
    /// No relay URL was given and the embedded relay's cannot be named.
    Relay(EmbeddedError),
    /// The record could not be created (the name is taken or invalid, no owner).
    Create(StoreError),
    Store(StoreError),
}

impl<E> From<StoreError> for SaveError<E> {
    fn from(e: StoreError) -> Self {
        SaveError::Store(e)
    }
}

/// Refuses the shown fields of `rec` that look like a key (all of them at once).
fn check_shown<E>(store: &Store, rec: &AgentRecord) -> Result<(), SaveError<E>> {
    let mut refused = Vec::new();
    for f in crate::shown::shown_fields(rec) {
        match store.refuse_secret(f.label, f.value) {
            Ok(()) => {}
            Err(e @ StoreError::SecretShaped { .. }) => refused.push((f.form_key, e)),
            Err(e) => return Err(SaveError::Store(e)),
        }
    }
    if refused.is_empty() {
        Ok(())
    } else {
        Err(SaveError::Shown(refused))
    }
}

/// Creates agent `name` on `relay_url`, else on this state dir's embedded relay.
pub fn create<E>(
    store: &Store,
    name: &str,
    relay_url: Option<&str>,
    fill: impl Fn(&mut AgentRecord) -> Result<EnvChanges, E>,
) -> Result<Saved, SaveError<E>> {
    let relay = match relay_url.map(str::trim).filter(|r| !r.is_empty()) {
        Some(r) => r.to_string(),
        None => embedded::url(store).map_err(SaveError::Relay)?,
    };
    let mut scratch = AgentRecord::new(name, &"0".repeat(64), &relay);
    fill(&mut scratch).map_err(SaveError::Fields)?;
    check_shown(store, &scratch)?;
    let mut rec = store.create_agent(name, &relay).map_err(SaveError::Create)?;
    let saved = fill(&mut rec).map_err(SaveError::Fields).and_then(|secret| {
        store.set_secret_env(&mut rec, &secret)?;
        store.save_agent(&rec)?;
        Ok(())
    });
    if let Err(e) = saved {
        store.delete_agent(name)?;
        return Err(e);
    }
    Ok(Saved {
        warnings: warnings(store, &rec),
        applies_after_restart: false,
        shared: share::share(store, name),
        record: rec,
    })
}

/// Edits agent `name`.
pub fn edit<E>(
    store: &Store,
    name: &str,
    fill: impl FnOnce(&mut AgentRecord) -> Result<EnvChanges, E>,
) -> Result<Saved, SaveError<E>> {
    let mut rec = store.agent(name)?;
    let secret = fill(&mut rec).map_err(SaveError::Fields)?;
    check_shown(store, &rec)?;
    store.set_secret_env(&mut rec, &secret)?;
    store.save_agent(&rec)?;
    let applies_after_restart = store
        .deploy_state(name)?
        .record_digest
        .is_some_and(|d| d != rec.launch_digest());
    Ok(Saved {
        warnings: warnings(store, &rec),
        applies_after_restart,
        shared: share::share(store, name),
        record: rec,
    })
}

/// The warnings after a save of `rec`, on this process's `PATH` and
/// environment (a local harness inherits both).
pub fn warnings(store: &Store, rec: &AgentRecord) -> Vec<String> {
    let settings = store.settings().unwrap_or_default();
    let secret = store.secret_env(&rec.name).unwrap_or_default();
    let path = std::env::var_os("PATH");
    let inherited = |k: &str| std::env::var_os(k).is_some_and(|v| !v.is_empty());
    crate::presets::warnings(rec, &settings, &secret, path.as_deref(), &inherited)
}
