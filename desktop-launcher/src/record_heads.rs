//! The last head of each agent's shared record this desktop wrote or read
//! (issue 52 item 2): `heads/<name>.json`, the signed kind 30179 event as
//! the relay has it. Its content is sealed to the owner, so the file holds
//! no secret in the clear; it is `0600` all the same, like the rest of the
//! state dir.
//!
//! The next head follows it (`g` + 1, `prev` its id, a `created_at` after
//! its own), and a head whose body says nothing new is not written
//! ([`crate::shared_record`], `app::share`). No head yet, or one that no
//! longer opens: the next head is a first one.
//!
//! `heads/deleted.json` remembers the deletions this desktop made or read
//! (agent key → the deletion's date), so a deleted agent is never brought
//! back from a head at or before it, also after a restart (issue 52 item 3).
//! [`Store::import_agent`] files an agent another desktop shared.

use super::{Store, StoreError, io, write_private};
use crate::record::AgentRecord;
use crate::shared_record::Materialized;
use buzz_contract::keys;
use buzz_contract::nip_oa::AuthTag;
use nostr_sdk::prelude::{Event, JsonUtil};
use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;

/// Why a shared agent was not filed here.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("the shared key does not derive the agent's pubkey")]
    KeyMismatch,
    #[error("the shared auth tag is not this owner's attestation of the agent")]
    BadAuthTag,
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Store {
    fn tombstones_path(&self) -> PathBuf {
        self.root.join("heads").join("deleted.json")
    }

    /// The deletions this desktop made or read: agent key (hex) → date.
    pub fn tombstones(&self) -> Result<BTreeMap<String, u64>, StoreError> {
        Ok(self.read_json(&self.tombstones_path())?.unwrap_or_default())
    }

    /// Remembers `seen` (agent key → date) beside the known deletions, the
    /// later date winning.
    pub fn add_tombstones(&self, seen: &BTreeMap<String, u64>) -> Result<(), StoreError> {
        let mut all = self.tombstones()?;
        let before = all.clone();
        for (k, at) in seen {
            let t = all.entry(k.clone()).or_default();
            *t = (*t).max(*at);
        }
        if all == before {
            return Ok(());
        }
        self.write_json(&self.tombstones_path(), &all, 0o600)
    }

    /// Files agent `m`, shared by another desktop of this owner: its key
    /// (which must derive its pubkey), its auth tag (this owner's, or minted
    /// anew when the head has none), its secret env and its record. The
    /// name must be free; nothing is written when a check fails.
    pub fn import_agent(&self, m: &Materialized) -> Result<AgentRecord, ImportError> {
        let rec = &m.record;
        Self::check_name(&rec.name)?;
        if self.agent_path(&rec.name).exists() {
            return Err(StoreError::AgentExists(rec.name.clone()).into());
        }
        let agent = keys::parse_private_key(&m.nsec).map_err(|_| ImportError::KeyMismatch)?;
        if keys::pubkey_hex(&agent) != rec.pubkey {
            return Err(ImportError::KeyMismatch);
        }
        let owner = self.owner()?;
        let tag = match &m.auth_tag {
            Some(t) => match AuthTag::verified_owner(t, &rec.pubkey) {
                Ok(o) if o == keys::pubkey_hex(&owner) => t.clone(),
                _ => return Err(ImportError::BadAuthTag),
            },
            None => AuthTag::mint(&owner, &rec.pubkey, "")
                .map_err(|_| ImportError::BadAuthTag)?
                .to_json(),
        };
        for f in crate::shown::shown_fields(rec) {
            self.refuse_secret(f.label, f.value)?;
        }
        let nsec =
            nostr_sdk::ToBech32::to_bech32(agent.secret_key()).map_err(|_| ImportError::KeyMismatch)?;
        let mut rec = rec.clone();
        let changes = m
            .secret_env
            .iter()
            .map(|(k, v)| (k.clone(), Some(v.clone())))
            .collect();
        let filed = write_private(&self.key_path(&rec.name, "nsec"), nsec.as_bytes(), 0o600)
            .and_then(|()| write_private(&self.key_path(&rec.name, "auth"), tag.as_bytes(), 0o600))
            .and_then(|()| self.set_secret_env(&mut rec, &changes))
            .and_then(|_| self.save_agent(&rec));
        if let Err(e) = filed {
            for ext in ["nsec", "auth", "env"] {
                let _ = fs::remove_file(self.key_path(&rec.name, ext));
            }
            return Err(e.into());
        }
        Ok(rec)
    }

    pub(super) fn head_path(&self, name: &str) -> PathBuf {
        self.root.join("heads").join(format!("{name}.json"))
    }

    /// The agent's last head, if any. A file that does not parse is no
    /// head (the next write replaces it).
    pub fn record_head(&self, name: &str) -> Result<Option<Event>, StoreError> {
        Self::check_name(name)?;
        let path = self.head_path(name);
        match fs::read_to_string(&path) {
            Ok(text) => Ok(Event::from_json(text).ok()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io("read", &path)(e)),
        }
    }

    pub(super) fn theirs_path(&self, name: &str) -> PathBuf {
        self.root.join("heads").join(format!("{name}.theirs.json"))
    }

    /// The other desktop's head in a conflict over this agent (issue 52
    /// item 4): another head written beside this desktop's own, from the
    /// same predecessor. `None`: no conflict.
    pub fn conflict_head(&self, name: &str) -> Result<Option<Event>, StoreError> {
        Self::check_name(name)?;
        let path = self.theirs_path(name);
        match fs::read_to_string(&path) {
            Ok(text) => Ok(Event::from_json(text).ok()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io("read", &path)(e)),
        }
    }

    /// Records `theirs` as the other side of a conflict over `name`.
    pub fn save_conflict_head(&self, name: &str, theirs: &Event) -> Result<(), StoreError> {
        Self::check_name(name)?;
        write_private(&self.theirs_path(name), theirs.as_json().as_bytes(), 0o600)
    }

    /// The conflict over `name` is resolved.
    pub fn clear_conflict_head(&self, name: &str) -> Result<(), StoreError> {
        Self::check_name(name)?;
        let path = self.theirs_path(name);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io("remove", &path)(e)),
        }
    }

    /// Keeps `head` as the agent's last.
    pub fn save_record_head(&self, name: &str, head: &Event) -> Result<(), StoreError> {
        Self::check_name(name)?;
        write_private(&self.head_path(name), head.as_json().as_bytes(), 0o600)
    }
}
