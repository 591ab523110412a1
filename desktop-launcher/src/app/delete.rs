//! `delete` of an agent's record (spec §Stop and Delete; review b30b1a0
//! finding 9). A deployed agent's delete that undeploys first is
//! [`super::teardown`]'s.

use super::agent::agent_lock;
use super::error::AppError;
use super::share::{self, Shared};
use crate::lock;
use crate::store::Store;
use std::time::Duration;

/// `delete` (spec §Stop and Delete; review b30b1a0 finding 9): refuses,
/// without `force_remote_delete`, a deployed agent and one whose local
/// harness runs (a verified identity, [`crate::local::running`]); refuses
/// always while a start of it is in progress (its lock is held: the start
/// would re-create what the delete removed, force or not).
/// The deletion is shared with the owner's other desktops ([`remove`]).
pub fn delete(store: &Store, name: &str, force_remote_delete: bool) -> Result<Shared, AppError> {
    let Some(_held) = lock::try_lock_for(&agent_lock(store, name), Duration::from_millis(200))? else {
        return Err(AppError::Busy(name.to_string()));
    };
    delete_locked(store, name, force_remote_delete)
}

/// [`delete`] once the agent's lock is held (see [`crate::app::teardown::delete`]).
pub(crate) fn delete_locked(
    store: &Store,
    name: &str,
    force_remote_delete: bool,
) -> Result<Shared, AppError> {
    store.agent(name)?;
    let state = store.deploy_state(name)?;
    if !force_remote_delete {
        if let Some(r) = crate::local::running_from(name, &state) {
            return Err(AppError::LiveLocal(r));
        }
        if let Some(id) = state.agent_id {
            return Err(AppError::Deployed(name.to_string(), id));
        }
    }
    remove(store, name)
}

/// Removes the record, key and bookkeeping of `name`, first telling the
/// owner's other desktops (a kind 5 naming its shared record): every
/// delete of a record goes through here.
pub(crate) fn remove(store: &Store, name: &str) -> Result<Shared, AppError> {
    let rec = store.agent(name)?;
    let shared = share::share_deletion(store, &rec);
    store.delete_agent(name)?;
    Ok(shared)
}
