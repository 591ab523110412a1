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

use super::{Store, StoreError, io, write_private};
use nostr_sdk::prelude::{Event, JsonUtil};
use std::fs;
use std::path::PathBuf;

impl Store {
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

    /// Keeps `head` as the agent's last.
    pub fn save_record_head(&self, name: &str, head: &Event) -> Result<(), StoreError> {
        Self::check_name(name)?;
        write_private(&self.head_path(name), head.as_json().as_bytes(), 0o600)
    }
}
