//! The embedded relay's persistent store: rust-nostr's in-memory database
//! (`nostr-database`'s `MemoryDatabase`, the one `nostr-relay-builder`
//! ships with) behind an append-only event log, `events.jsonl` in the data
//! directory.
//!
//! Why not an on-disk database from the ecosystem (`nostr-lmdb`): it pulls
//! in a C library build (LMDB) and a second storage engine for what is a
//! small, single-user relay: the owner's agents, their chats and `!shutdown`
//! commands. The log keeps the dependency set at what the workspace already
//! builds. On start the log is replayed (each line verified again,
//! unreadable or forged lines skipped and counted) and rewritten compactly,
//! so deletions and replaced events do not accumulate.
//!
//! **One writer** (review b30b1a0 finding 1): [`LogStore::open`] first takes
//! the data directory's lock ([`super::data_lock`]) and keeps it for the
//! store's life; the compaction's temp file has a name unique to the call,
//! and leftovers of a crashed compaction are removed under the lock.
//!
//! **Appends** (finding 12): the log is written *before* the memory
//! database is told, one `write` of the JSON line with its newline, under
//! one lock that also covers the memory save, so the log's order is the
//! memory's order. If the write fails (ENOSPC, EIO, a file-size limit) the
//! file is truncated back to its previous length and the memory database
//! never sees the event: the client gets `OK false error:` and its retry is
//! a fresh save, never `duplicate:` for an event that is not on disk. If
//! the memory database then refuses or fails the event (a duplicate, a
//! replaced or deleted event), its line is truncated away too, so the log
//! holds exactly what memory holds. A truncation that itself fails is
//! retried before the next append.
//!
//! **Durability**: `OK true` means the line is in the kernel (survives the
//! relay process crashing or being killed). The file is `fdatasync`ed
//! within [`SYNC_DELAY`] after an append (one sync for every append in
//! that window, on a blocking thread) and when the store is dropped; a
//! power loss or kernel crash can lose the events acknowledged in the last
//! [`SYNC_DELAY`] plus the sync's own time. A sync per event before its
//! `OK` was measured at ≈ 2 ms on this machine's disk, ≈ 450 events/s for
//! one connection (the library serves a connection's messages one at a
//! time, so syncs cannot be grouped per client): 35 times slower than the
//! relay's figure, for a relay whose writers retry anyway (the harness and
//! the launcher publish until they see the event). The compacted log and
//! its rename are synced (file and directory) before the relay serves.
//!
//! Ephemeral events (kinds 20000–29999, presence included) never reach the
//! store: the relay library broadcasts them without saving (wire-facts §3),
//! and [`LogStore::save_event`] refuses them as a second guard.

use super::data_lock::{DataDirLock, describe_pid};
use super::log_file::Log;
pub use super::log_file::SYNC_DELAY;
use nostr_relay_builder::prelude::{
    Backend, BoxedFuture, DatabaseError, DatabaseEventStatus, Event, EventId, Events, Filter, JsonUtil,
    MemoryDatabase, MemoryDatabaseOptions, NostrDatabase, RejectedReason, SaveEventStatus,
};
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    #[error(
        "relay data dir {} is in use by another relay ({}); stop it first (`buzz-launcher relay stop`) or pick another --data",
        dir.display(),
        describe_pid(pid)
    )]
    DataDirInUse {
        /// The data directory.
        dir: PathBuf,
        /// The holder's pid as it recorded it, when readable.
        pid: Option<u32>,
    },
    #[error("cannot lock the relay data directory ({path}): {source}")]
    Lock { path: PathBuf, source: std::io::Error },
}

/// The memory database plus its log.
#[derive(Debug, Clone)]
pub struct LogStore {
    mem: MemoryDatabase,
    log: Option<Arc<Log>>,
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

fn temp_name() -> String {
    format!(
        "{LOG_FILE}.tmp.{}.{}",
        std::process::id(),
        hex::encode(rand::random::<[u8; 6]>())
    )
}

/// Removes temp files a crashed compaction left (only ever called under the lock).
fn remove_leftovers(dir: &Path) {
    let prefix = format!("{LOG_FILE}.tmp");
    let Ok(entries) = fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        if e.file_name().to_str().is_some_and(|n| n.starts_with(&prefix)) {
            let _ = fs::remove_file(e.path());
        }
    }
}

impl LogStore {
    /// A store with no log (nothing survives a restart).
    pub fn in_memory() -> LogStore {
        LogStore {
            mem: memory(),
            log: None,
        }
    }

    /// Opens (creating) `dir`, locks it, replays its log and rewrites it compactly.
    pub async fn open(dir: &Path) -> Result<(LogStore, Replay), StoreOpenError> {
        let not_writable = |source| StoreOpenError::NotWritable {
            dir: dir.to_path_buf(),
            source,
        };
        fs::create_dir_all(dir).map_err(not_writable)?;
        let lock = DataDirLock::acquire(dir)?;
        remove_leftovers(dir);
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
        let tmp = dir.join(temp_name());
        {
            let mut f = File::create(&tmp).map_err(not_writable)?;
            let all = mem.query(Filter::new()).await.unwrap_or_default();
            let mut events: Vec<Event> = all.into_iter().collect();
            events.sort_by_key(|e| e.created_at);
            let mut text = String::new();
            for e in events {
                text.push_str(&e.as_json());
                text.push('\n');
            }
            f.write_all(text.as_bytes()).map_err(not_writable)?;
            f.sync_all().map_err(not_writable)?;
        }
        fs::rename(&tmp, &path).map_err(not_writable)?;
        File::open(dir).and_then(|d| d.sync_all()).map_err(not_writable)?;
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(not_writable)?;
        let log = Log::new(file, lock).map_err(not_writable)?;
        Ok((
            LogStore {
                mem,
                log: Some(Arc::new(log)),
            },
            replay,
        ))
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
            let Some(log) = &self.log else {
                return self.mem.save_event(event).await;
            };
            let mut line = event.as_json();
            line.push('\n');
            let mut f = log.file.lock().await;
            f.append(line.as_bytes()).map_err(DatabaseError::backend)?;
            let n = line.len() as u64;
            match self.mem.save_event(event).await {
                Ok(status) if status.is_success() => {
                    drop(f);
                    log.schedule_sync();
                    Ok(status)
                }
                Ok(status) => {
                    f.unappend(n);
                    Ok(status)
                }
                Err(e) => {
                    f.unappend(n);
                    Err(e)
                }
            }
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

    fn note(keys: &Keys, content: &str) -> Event {
        EventBuilder::new(Kind::from(9), content)
            .sign_with_keys(keys)
            .unwrap()
    }

    async fn stored(s: &LogStore) -> Vec<Event> {
        let mut v: Vec<Event> = s.query(Filter::new()).await.unwrap().into_iter().collect();
        v.sort_by_key(|e| e.content.clone());
        v
    }

    #[tokio::test]
    async fn a_second_store_on_the_same_dir_is_refused_and_the_first_keeps_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let keys = Keys::generate();
        // A crashed compaction's leftover is cleared under the lock.
        fs::write(dir.path().join(format!("{LOG_FILE}.tmp")), "torn").unwrap();
        let (first, _) = LogStore::open(dir.path()).await.unwrap();
        assert!(!dir.path().join(format!("{LOG_FILE}.tmp")).exists());
        let e1 = note(&keys, "e1");
        assert!(first.save_event(&e1).await.unwrap().is_success());
        let before = fs::read(dir.path().join(LOG_FILE)).unwrap();
        let err = LogStore::open(dir.path()).await.unwrap_err();
        assert!(
            matches!(&err, StoreOpenError::DataDirInUse { dir: d, pid: Some(p) } if d == dir.path() && *p == std::process::id()),
            "{err}"
        );
        assert_eq!(
            fs::read(dir.path().join(LOG_FILE)).unwrap(),
            before,
            "the refused open touched nothing"
        );
        let e2 = note(&keys, "e2");
        assert!(first.save_event(&e2).await.unwrap().is_success());
        drop(first);
        let (again, r) = LogStore::open(dir.path()).await.unwrap();
        assert_eq!(
            r,
            Replay {
                loaded: 2,
                skipped: 0
            }
        );
        assert_eq!(stored(&again).await, vec![e1, e2]);
    }

    #[tokio::test]
    async fn the_log_holds_exactly_what_memory_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let keys = Keys::generate();
        let (s, _) = LogStore::open(dir.path()).await.unwrap();
        let e = note(&keys, "once");
        assert!(s.save_event(&e).await.unwrap().is_success());
        assert_eq!(
            s.save_event(&e).await.unwrap(),
            SaveEventStatus::Rejected(RejectedReason::Duplicate)
        );
        // A replaceable event older than the one held is refused by memory.
        let newer = EventBuilder::new(Kind::from(0), "{}")
            .custom_created_at(nostr_sdk::prelude::Timestamp::from(2_000))
            .sign_with_keys(&keys)
            .unwrap();
        let older = EventBuilder::new(Kind::from(0), "{}")
            .custom_created_at(nostr_sdk::prelude::Timestamp::from(1_000))
            .sign_with_keys(&keys)
            .unwrap();
        assert!(s.save_event(&newer).await.unwrap().is_success());
        assert!(!s.save_event(&older).await.unwrap().is_success());
        let text = fs::read_to_string(dir.path().join(LOG_FILE)).unwrap();
        let ids: Vec<String> = text
            .lines()
            .map(|l| Event::from_json(l).unwrap().id.to_hex())
            .collect();
        assert_eq!(ids, vec![e.id.to_hex(), newer.id.to_hex()]);
    }

    const FSIZE_CHILD: &str = "BUZZ_TEST_LOG_STORE_FSIZE_CHILD";

    /// Runs in a child process (the parent below): under a file-size limit
    /// that e2's line crosses halfway and e3's does not.
    #[tokio::test]
    #[ignore = "the child half of a_failed_append_leaves_no_torn_line_and_no_phantom_event"]
    async fn fsize_child() {
        let Some(root) = std::env::var_os(FSIZE_CHILD) else {
            return;
        };
        let root = PathBuf::from(root);
        let data = root.join("data");
        let keys = Keys::generate();
        let (s, r) = LogStore::open(&data).await.unwrap();
        assert_eq!(r.loaded, 1);
        let len = fs::metadata(data.join(LOG_FILE)).unwrap().len();
        let e2 = note(&keys, &"e2".repeat(2_000));
        let e3 = note(&keys, "e3");
        let room = e3.as_json().len() as u64 + 1 + 16;
        // SAFETY: ignoring SIGXFSZ so an oversized write fails with EFBIG,
        // and lowering this (child) process's file-size limit.
        let mut original = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        unsafe {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut original), 0);
            let lim = libc::rlimit {
                rlim_cur: len + room,
                rlim_max: original.rlim_max,
            };
            assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &lim), 0);
        }
        for attempt in ["first", "retry"] {
            assert!(
                s.save_event(&e2).await.is_err(),
                "{attempt}: e2 cannot be written"
            );
            assert_eq!(
                s.check_id(&e2.id).await.unwrap(),
                DatabaseEventStatus::NotExistent,
                "{attempt}: a failed e2 is not in memory, so a retry is never `duplicate:`"
            );
            if attempt == "first" {
                assert_eq!(
                    fs::metadata(data.join(LOG_FILE)).unwrap().len(),
                    len,
                    "no torn bytes"
                );
                assert!(s.save_event(&e3).await.unwrap().is_success());
            }
        }
        // SAFETY: restoring the original limit (within the unchanged hard limit).
        unsafe {
            assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &original), 0);
        }
        fs::write(
            root.join("ids"),
            format!("{}\n{}\n", e2.as_json(), e3.id.to_hex()),
        )
        .unwrap();
    }

    #[tokio::test]
    async fn a_failed_append_leaves_no_torn_line_and_no_phantom_event() {
        let root = tempfile::tempdir().unwrap();
        let data = root.path().join("data");
        let e1 = note(&Keys::generate(), "e1");
        {
            let (s, _) = LogStore::open(&data).await.unwrap();
            assert!(s.save_event(&e1).await.unwrap().is_success());
        }
        let child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "log_store::tests::fsize_child",
                "--test-threads=1",
            ])
            .env(FSIZE_CHILD, root.path())
            .output()
            .unwrap();
        assert!(
            child.status.success(),
            "the child's assertions failed ({}):\n{}{}",
            child.status,
            String::from_utf8_lossy(&child.stdout),
            String::from_utf8_lossy(&child.stderr)
        );
        let ids = fs::read_to_string(root.path().join("ids")).expect("the child ran");
        let mut lines = ids.lines();
        let e2 = Event::from_json(lines.next().unwrap()).unwrap();
        let e3 = lines.next().unwrap().to_string();
        let (s, r) = LogStore::open(&data).await.unwrap();
        assert_eq!(
            r,
            Replay {
                loaded: 2,
                skipped: 0
            },
            "e1 and e3, no torn line"
        );
        let got: Vec<String> = stored(&s).await.iter().map(|e| e.id.to_hex()).collect();
        assert_eq!(got, vec![e1.id.to_hex(), e3]);
        // With room again, e2 is stored on its next try.
        assert!(s.save_event(&e2).await.unwrap().is_success());
    }

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
