//! The agents the embedded relay admits: this state dir's agent records,
//! handed to the relay ([`buzz_relay`]) through its
//! [`AgentDirectory`] trait, so the relay never reads the launcher's store
//! (review b30b1a0 finding 11: deleting an agent revokes its key at the
//! relay). The store decides what a record says ([`Store::agent_pubkeys`]).

use crate::store::Store;
use buzz_relay::agents::{AgentDirectory, DirectoryError};
use std::collections::HashSet;

/// The state dir's agent records as the relay's directory.
#[derive(Debug, Clone)]
pub struct Enrolled {
    store: Store,
}

impl Enrolled {
    /// The records of `store`.
    pub fn new(store: Store) -> Enrolled {
        Enrolled { store }
    }
}

impl AgentDirectory for Enrolled {
    fn enrolled(&self) -> Result<HashSet<String>, DirectoryError> {
        self.store
            .agent_pubkeys()
            .map_err(|e| DirectoryError(Box::new(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_s_agent_records_are_read_and_a_deleted_one_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.init_owner(None).unwrap();
        let a = store.create_agent("alpha", "ws://127.0.0.1:1").unwrap();
        let b = store.create_agent("beta", "ws://127.0.0.1:1").unwrap();
        // Noise that enrols nobody: a non-record, a broken record, a bad key.
        std::fs::write(dir.path().join("agents/notes.txt"), "x").unwrap();
        std::fs::write(dir.path().join("agents/broken.json"), "{").unwrap();
        std::fs::write(
            dir.path().join("agents/upper.json"),
            format!(r#"{{"pubkey":"{}"}}"#, "A".repeat(64)),
        )
        .unwrap();
        let agents = Enrolled::new(store.clone());
        let got = agents.enrolled().unwrap();
        assert_eq!(got, HashSet::from([a.pubkey.clone(), b.pubkey.clone()]));
        store.delete_agent("alpha").unwrap();
        assert_eq!(agents.enrolled().unwrap(), HashSet::from([b.pubkey]));
    }

    #[test]
    fn a_missing_records_dir_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        std::fs::remove_dir_all(dir.path().join("agents")).ok();
        let err = Enrolled::new(store).enrolled().unwrap_err();
        assert!(
            err.to_string()
                .contains(&dir.path().join("agents").display().to_string()),
            "{err}"
        );
    }
}
