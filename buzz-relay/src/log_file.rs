//! The event log's file: append-only, one `write` per line, cut back on
//! failure, and synced shortly after (review b30b1a0 finding 12; the
//! durability this gives is stated in [`super::log_store`]).

use super::data_lock::DataDirLock;
use std::fs::File;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The longest an acknowledged event waits for its `fdatasync`.
pub const SYNC_DELAY: Duration = Duration::from_millis(100);

/// The open log, its append lock, its syncer and the data dir lock.
#[derive(Debug)]
pub(super) struct Log {
    pub(super) file: tokio::sync::Mutex<LogFile>,
    /// A second handle on the log, for `fdatasync` off the append path.
    sync_handle: Arc<File>,
    sync_pending: Arc<AtomicBool>,
    _lock: DataDirLock,
}

/// The file and the length of its last complete line.
#[derive(Debug)]
pub(super) struct LogFile {
    pub(super) file: File,
    /// The length of the log's last complete line.
    len: u64,
    /// A failed write or rollback left bytes past `len`.
    torn: bool,
}

impl LogFile {
    fn repair(&mut self) -> std::io::Result<()> {
        if self.torn {
            self.file.set_len(self.len)?;
            self.torn = false;
        }
        Ok(())
    }

    /// Appends `line` (with its newline) in one write; on failure the file
    /// is cut back to where it was.
    pub(super) fn append(&mut self, line: &[u8]) -> std::io::Result<()> {
        self.repair()?;
        match self.file.write_all(line) {
            Ok(()) => {
                self.len += line.len() as u64;
                Ok(())
            }
            Err(e) => {
                self.torn = true;
                let _ = self.repair();
                Err(e)
            }
        }
    }

    /// Removes the last `n` bytes just appended.
    pub(super) fn unappend(&mut self, n: u64) {
        self.len = self.len.saturating_sub(n);
        self.torn = true;
        if let Err(e) = self.repair() {
            tracing::warn!("cannot truncate the relay event log (retried at the next append): {e}");
        }
    }
}

impl Log {
    /// Wraps `file` (opened for appending), holding `lock` for its life.
    pub(super) fn new(file: File, lock: DataDirLock) -> std::io::Result<Log> {
        let len = file.metadata()?.len();
        let sync_handle = Arc::new(file.try_clone()?);
        Ok(Log {
            file: tokio::sync::Mutex::new(LogFile {
                file,
                len,
                torn: false,
            }),
            sync_handle,
            sync_pending: Arc::new(AtomicBool::new(false)),
            _lock: lock,
        })
    }

    pub(super) fn schedule_sync(&self) {
        if self.sync_pending.swap(true, Ordering::AcqRel) {
            return;
        }
        let handle = self.sync_handle.clone();
        let pending = self.sync_pending.clone();
        let sync = move || {
            if let Err(e) = handle.sync_data() {
                tracing::warn!("cannot sync the relay event log: {e}");
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    tokio::time::sleep(SYNC_DELAY).await;
                    // Appends from here on schedule the next sync.
                    pending.store(false, Ordering::Release);
                    let _ = tokio::task::spawn_blocking(sync).await;
                });
            }
            Err(_) => {
                pending.store(false, Ordering::Release);
                sync();
            }
        }
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        let _ = self.sync_handle.sync_data();
    }
}
