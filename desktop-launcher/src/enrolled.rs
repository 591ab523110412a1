//! The agents the embedded relay admits: this state dir's agent records,
//! handed to the relay ([`buzz_relay`]) through its
//! [`AgentDirectory`] trait, so the relay never reads the launcher's store
//! (review b30b1a0 finding 11: deleting an agent revokes its key at the
//! relay). The store decides what a record says ([`Store::agent_pubkeys`]).
//!
//! The relay re-reads the records only when they changed (issue 49 item 4:
//! a re-read of 1 000 records every 2 s was most of its CPU at rest): the
//! [`Version`] is the store's change marker ([`Store::records_marker`],
//! rewritten after every record write or delete, by any launcher process)
//! and the records directory's modification time, which also moves when a
//! record is removed by hand.

use crate::store::Store;
use buzz_relay::agents::{AgentDirectory, DirectoryError, Version};
use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;

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

    fn version(&self) -> Result<Version, DirectoryError> {
        let marker = self.store.records_marker();
        let mut token = match std::fs::read(&marker) {
            Ok(t) => t,
            // No record was written by this launcher version yet.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(DirectoryError(Box::new(e))),
        };
        let dir = marker.parent().unwrap_or(self.store.root());
        let meta = std::fs::metadata(dir).map_err(|e| DirectoryError(Box::new(e)))?;
        token.extend_from_slice(&meta.mtime().to_le_bytes());
        token.extend_from_slice(&meta.mtime_nsec().to_le_bytes());
        Ok(Version::Token(token))
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

    /// Issue 49 item 4: the relay re-reads the records only when the
    /// version moved, so every write and delete must move it.
    #[test]
    fn every_record_write_and_delete_changes_the_marker_and_the_version() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.init_owner(None).unwrap();
        let agents = Enrolled::new(store.clone());
        let marker = || std::fs::read(store.records_marker()).unwrap_or_default();
        let (mut m, mut v) = (marker(), agents.version().unwrap());
        assert_eq!(agents.version().unwrap(), v, "nothing changed");
        let mut moved = |what: &str| {
            let (m2, v2) = (marker(), agents.version().unwrap());
            assert_ne!(m2, m, "{what} left the marker as it was");
            assert_ne!(v2, v, "{what} left the version as it was");
            (m, v) = (m2, v2);
        };
        let rec = store.create_agent("alpha", "ws://127.0.0.1:1").unwrap();
        moved("create");
        store.save_agent(&rec).unwrap();
        moved("save");
        store.delete_agent("alpha").unwrap();
        moved("delete");
        // The marker is no record.
        assert!(agents.enrolled().unwrap().is_empty());
        assert!(store.agents().unwrap().is_empty());
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
