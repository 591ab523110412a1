//! `delete` of an agent's record (spec §Stop and Delete; review b30b1a0
//! finding 9). A deployed agent's delete that undeploys first is
//! [`super::teardown`]'s.

use super::agent::agent_lock;
use super::error::AppError;
use crate::lock;
use crate::store::Store;
use std::time::Duration;

/// `delete` (spec §Stop and Delete; review b30b1a0 finding 9): refuses,
/// without `force_remote_delete`, a deployed agent and one whose local
/// harness runs (a verified identity, [`crate::local::running`]); refuses
/// always while a start of it is in progress (its lock is held: the start
/// would re-create what the delete removed, force or not).
pub fn delete(store: &Store, name: &str, force_remote_delete: bool) -> Result<(), AppError> {
    let Some(_held) = lock::try_lock_for(&agent_lock(store, name), Duration::from_millis(200))? else {
        return Err(AppError::Busy(name.to_string()));
    };
    delete_locked(store, name, force_remote_delete)
}

/// [`delete`] once the agent's lock is held (see [`crate::app::teardown::delete`]).
pub(crate) fn delete_locked(store: &Store, name: &str, force_remote_delete: bool) -> Result<(), AppError> {
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
    store.delete_agent(name)?;
    Ok(())
}
