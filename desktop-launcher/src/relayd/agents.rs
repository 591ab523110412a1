//! Which agent keys the launcher still knows (review b30b1a0 finding 11:
//! revocation). The relay admits an attested agent only while a record with
//! its pubkey exists; deleting the agent (`buzz-launcher agent delete`,
//! `Store::delete_agent`) removes the record, so the key is refused at its
//! next AUTH, and a session it holds ends within [`super::Limits::records_recheck`].
//!
//! The records are the state dir's `agents/<name>.json` (`store.rs`'s
//! layout; `record::AgentRecord`'s `pubkey` field, 64 lowercase hex). This
//! module only reads them, never writes: the store owns them. A record that
//! cannot be parsed enrols nobody; a directory that cannot be listed is an
//! error, so the caller fails closed.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The agent records could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the agent records in {dir}: {source}")]
pub struct DirectoryError {
    /// The directory that was listed.
    pub dir: PathBuf,
    /// The I/O failure.
    pub source: std::io::Error,
}

/// A source of enrolled agent pubkeys. Reads are blocking (the relay calls
/// them on a blocking thread).
pub trait AgentDirectory: Send + Sync + std::fmt::Debug {
    /// Every enrolled agent's pubkey (64 lowercase hex), read now.
    fn enrolled(&self) -> Result<HashSet<String>, DirectoryError>;
}

/// The launcher state dir's agent records, `<state>/agents/*.json`.
#[derive(Debug, Clone)]
pub struct StateDirAgents {
    dir: PathBuf,
}

impl StateDirAgents {
    /// The records of the state dir `root` (`$BUZZ_LAUNCHER_HOME`).
    pub fn new(root: &Path) -> StateDirAgents {
        StateDirAgents {
            dir: root.join("agents"),
        }
    }
}

#[derive(serde::Deserialize)]
struct PubkeyOnly {
    pubkey: String,
}

fn is_pubkey_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl AgentDirectory for StateDirAgents {
    fn enrolled(&self) -> Result<HashSet<String>, DirectoryError> {
        let err = |source| DirectoryError {
            dir: self.dir.clone(),
            source,
        };
        let mut keys = HashSet::new();
        for entry in std::fs::read_dir(&self.dir).map_err(err)? {
            let path = entry.map_err(err)?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            // A record removed between the listing and the read is simply gone.
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            if let Ok(r) = serde_json::from_str::<PubkeyOnly>(&text)
                && is_pubkey_hex(&r.pubkey)
            {
                keys.insert(r.pubkey);
            }
        }
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

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
        let agents = StateDirAgents::new(dir.path());
        let got = agents.enrolled().unwrap();
        assert_eq!(got, HashSet::from([a.pubkey.clone(), b.pubkey.clone()]));
        store.delete_agent("alpha").unwrap();
        assert_eq!(agents.enrolled().unwrap(), HashSet::from([b.pubkey]));
    }

    #[test]
    fn a_missing_records_dir_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let err = StateDirAgents::new(&dir.path().join("nope"))
            .enrolled()
            .unwrap_err();
        assert!(
            err.to_string()
                .contains(&dir.path().join("nope/agents").display().to_string()),
            "{err}"
        );
    }
}
