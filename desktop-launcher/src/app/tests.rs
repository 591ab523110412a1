//! Unit tests of [`super`] (the commands): deletes refused while a start
//! holds the agent's lock or its local harness runs, and the stop's second.

use super::agent::agent_lock;
use super::*;
use crate::lock;
use crate::store::{Store, StoreError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[test]
fn delete_is_refused_while_a_start_holds_the_agents_lock_even_with_force() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    store.init_owner(None).unwrap();
    store.create_agent("a", "ws://127.0.0.1:1").unwrap();
    let held = lock::lock(&agent_lock(&store, "a")).unwrap();
    for force in [false, true] {
        assert!(
            matches!(delete(&store, "a", force), Err(AppError::Busy(_))),
            "force {force}"
        );
    }
    drop(held);
    delete(&store, "a", false).unwrap();
    assert!(matches!(store.agent("a"), Err(StoreError::NoAgent(_))));
}

#[test]
fn delete_refuses_a_live_local_harness_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    store.init_owner(None).unwrap();
    store.create_agent("a", "ws://127.0.0.1:1").unwrap();
    let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    let id = crate::procid::ProcessId::of(child.id()).unwrap();
    store
        .update_deploy_state("a", |st| {
            st.local_pid = Some(id.pid);
            st.local_process = Some(id.clone());
        })
        .unwrap();
    let refused = delete(&store, "a", false);
    let _ = child.kill();
    let _ = child.wait();
    assert!(matches!(refused, Err(AppError::LiveLocal(_))), "{refused:?}");
    // Once the process is gone, its record no longer counts as running.
    delete(&store, "a", false).unwrap();
}

#[test]
fn until_after_second_waits_out_the_rest_of_that_second_only() {
    let at = |s: u64, ms: u64| UNIX_EPOCH + Duration::from_secs(s) + Duration::from_millis(ms);
    assert_eq!(until_after_second(100, at(100, 0)), Duration::from_secs(1));
    assert_eq!(until_after_second(100, at(100, 750)), Duration::from_millis(250));
    assert_eq!(until_after_second(100, at(101, 0)), Duration::ZERO);
    assert_eq!(until_after_second(100, at(103, 5)), Duration::ZERO);
    assert!(until_after_second(100, SystemTime::now()) == Duration::ZERO);
}
