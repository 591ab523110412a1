//! The embedded relay's persistent store: rust-nostr's in-memory database
//! (`nostr-database`'s `MemoryDatabase`, the one `nostr-relay-builder`
//! ships with) behind an append-only event log, `events.jsonl` in the data
//! directory.
//!
//! Why not an on-disk database from the ecosystem (`nostr-lmdb`): it pulls
//! in a C library build (LMDB) and a second storage engine for what is a
//! small, single-user relay: the owner's agents, their chats and `!shutdown`
//! commands. The log keeps the dependency set at what the workspace already
//! builds. Every stored event is appended as one JSON line after the memory
//! database accepted it; on start the log is replayed (each line verified
//! again, unreadable or forged lines skipped and counted) and rewritten
//! compactly, so deletions and replaced events do not accumulate.
//!
//! Ephemeral events (kinds 20000–29999, presence included) never reach the
//! store: the relay library broadcasts them without saving (wire-facts §3),
//! and [`LogStore::save_event`] refuses them as a second guard.

use nostr_relay_builder::prelude::{
    Backend, BoxedFuture, DatabaseError, DatabaseEventStatus, Event, EventId, Events, Filter, JsonUtil,
    MemoryDatabase, MemoryDatabaseOptions, NostrDatabase, RejectedReason, SaveEventStatus,
};
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The most events kept in memory (older ones are dropped by the memory database).
pub const MAX_EVENTS: usize = 100_000;

/// The log's file name inside the data directory.
pub const LOG_FILE: &str = "events.jsonl";

/// A store failure at open time.
#[derive(Debug, thiserror::Error)]
pub enum StoreOpenError {
    #[error("the relay data directory {dir} is not writable: {source}")]
    NotWritable { dir: PathBuf, source: std::io::Error },
    #[error("cannot read the relay event log {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
}

/// The memory database plus its log.
#[derive(Debug, Clone)]
pub struct LogStore {
    mem: MemoryDatabase,
    log: Option<Arc<Mutex<File>>>,
}

/// What opening the log found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replay {
    /// Events loaded back.
    pub loaded: usize,
    /// Lines skipped (unparsable or failing verification).
    pub skipped: usize,
}

fn memory() -> MemoryDatabase {
    MemoryDatabase::with_opts(MemoryDatabaseOptions {
        events: true,
        max_events: Some(MAX_EVENTS),
    })
}

impl LogStore {
    /// A store with no log (nothing survives a restart).
    pub fn in_memory() -> LogStore {
        LogStore {
            mem: memory(),
            log: None,
        }
    }

    /// Opens (creating) `dir`, replays its log and rewrites it compactly.
    pub async fn open(dir: &Path) -> Result<(LogStore, Replay), StoreOpenError> {
        let not_writable = |source| StoreOpenError::NotWritable {
            dir: dir.to_path_buf(),
            source,
        };
        fs::create_dir_all(dir).map_err(not_writable)?;
        let path = dir.join(LOG_FILE);
        let mem = memory();
        let mut replay = Replay::default();
        match File::open(&path) {
            Ok(f) => {
                for line in BufReader::new(f).lines() {
                    let line = line.map_err(|source| StoreOpenError::Read {
                        path: path.clone(),
                        source,
                    })?;
                    if line.trim().is_empty() {
                        continue;
                    }
                    match Event::from_json(&line) {
                        Ok(e) if e.verify().is_ok() && !e.kind.is_ephemeral() => {
                            if mem.save_event(&e).await.is_ok() {
                                replay.loaded += 1;
                            }
                        }
                        _ => replay.skipped += 1,
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(StoreOpenError::Read { path, source }),
        }
        // Compact: write what survived to a temp file, then rename over the log.
        let tmp = dir.join(format!("{LOG_FILE}.tmp"));
        {
            let mut f = File::create(&tmp).map_err(not_writable)?;
            let all = mem.query(Filter::new()).await.unwrap_or_default();
            let mut events: Vec<Event> = all.into_iter().collect();
            events.sort_by_key(|e| e.created_at);
            for e in events {
                writeln!(f, "{}", e.as_json()).map_err(not_writable)?;
            }
            f.sync_all().map_err(not_writable)?;
        }
        fs::rename(&tmp, &path).map_err(not_writable)?;
        let log = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(not_writable)?;
        Ok((
            LogStore {
                mem,
                log: Some(Arc::new(Mutex::new(log))),
            },
            replay,
        ))
    }

    fn append(&self, event: &Event) -> Result<(), DatabaseError> {
        let Some(log) = &self.log else { return Ok(()) };
        let mut f = log.lock().unwrap_or_else(|p| p.into_inner());
        writeln!(f, "{}", event.as_json()).map_err(DatabaseError::backend)
    }
}

impl NostrDatabase for LogStore {
    fn backend(&self) -> Backend {
        Backend::Custom("memory+log".into())
    }

    fn save_event<'a>(&'a self, event: &'a Event) -> BoxedFuture<'a, Result<SaveEventStatus, DatabaseError>> {
        Box::pin(async move {
            if event.kind.is_ephemeral() {
                return Ok(SaveEventStatus::Rejected(RejectedReason::Ephemeral));
            }
            let status = self.mem.save_event(event).await?;
            if status.is_success() {
                self.append(event)?;
            }
            Ok(status)
        })
    }

    fn check_id<'a>(
        &'a self,
        event_id: &'a EventId,
    ) -> BoxedFuture<'a, Result<DatabaseEventStatus, DatabaseError>> {
        self.mem.check_id(event_id)
    }

    fn event_by_id<'a>(
        &'a self,
        event_id: &'a EventId,
    ) -> BoxedFuture<'a, Result<Option<Event>, DatabaseError>> {
        self.mem.event_by_id(event_id)
    }

    fn count(&self, filter: Filter) -> BoxedFuture<'_, Result<usize, DatabaseError>> {
        self.mem.count(filter)
    }

    fn query(&self, filter: Filter) -> BoxedFuture<'_, Result<Events, DatabaseError>> {
        self.mem.query(filter)
    }

    fn delete(&self, filter: Filter) -> BoxedFuture<'_, Result<(), DatabaseError>> {
        self.mem.delete(filter)
    }

    fn wipe(&self) -> BoxedFuture<'_, Result<(), DatabaseError>> {
        self.mem.wipe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr_sdk::prelude::{EventBuilder, Keys, Kind};

    #[tokio::test]
    async fn stored_events_survive_a_reopen_and_ephemeral_ones_never_reach_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let keys = Keys::generate();
        let note = EventBuilder::new(Kind::from(9), "kept")
            .sign_with_keys(&keys)
            .unwrap();
        let presence = EventBuilder::new(Kind::from(20001), "online")
            .sign_with_keys(&keys)
            .unwrap();
        {
            let (s, r) = LogStore::open(dir.path()).await.unwrap();
            assert_eq!(r, Replay::default());
            assert!(s.save_event(&note).await.unwrap().is_success());
            assert_eq!(
                s.save_event(&presence).await.unwrap(),
                SaveEventStatus::Rejected(RejectedReason::Ephemeral)
            );
        }
        // A forged line and garbage are skipped, not loaded.
        let mut forged: serde_json::Value = serde_json::from_str(&note.as_json()).unwrap();
        forged["content"] = "changed".into();
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.path().join(LOG_FILE))
            .unwrap();
        writeln!(f, "{forged}\nnot json").unwrap();
        drop(f);
        let (s, r) = LogStore::open(dir.path()).await.unwrap();
        assert_eq!(
            r,
            Replay {
                loaded: 1,
                skipped: 2
            }
        );
        let all: Vec<Event> = s.query(Filter::new()).await.unwrap().into_iter().collect();
        assert_eq!(all, vec![note]);
        let text = fs::read_to_string(dir.path().join(LOG_FILE)).unwrap();
        assert_eq!(text.lines().count(), 1, "the log is compacted on open");
    }

    #[tokio::test]
    async fn an_unusable_data_dir_is_a_clear_error_naming_it() {
        // A path under a regular file cannot be created, even by root.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        fs::write(&file, b"x").unwrap();
        let bad = file.join("data");
        let err = LogStore::open(&bad).await.unwrap_err();
        assert!(
            matches!(&err, StoreOpenError::NotWritable { dir, .. } if *dir == bad),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains(&format!("{} is not writable", bad.display()))
        );
    }
}
