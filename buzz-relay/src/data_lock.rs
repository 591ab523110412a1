//! One relay per data directory (review b30b1a0 finding 1).
//!
//! Before the store reads or compacts `events.jsonl`, the relay takes an
//! exclusive, non-blocking `flock(2)` on `<data>/LOCK` and holds it for as
//! long as the store lives (the process lifetime for `buzz-launcher
//! relay`). A second relay on the same directory, in this process or
//! another, fails with [`StoreOpenError::DataDirInUse`] naming the holder's
//! pid, and touches nothing: without the lock it would compact the log and
//! rename a new file over it, and the live relay would go on appending to
//! the unlinked old inode, losing every event from then on.
//!
//! `flock` locks belong to the open file description, so the kernel
//! releases the lock when the holder exits, however it exits: a crashed
//! relay never leaves a stale lock. The pid written into the file is only
//! for the error message.

use super::log_store::StoreOpenError;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The lock file's name inside the data directory.
pub const LOCK_FILE: &str = "LOCK";

/// The held lock; dropping it releases the directory.
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
}

fn holder_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.take(32).read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

impl DataDirLock {
    /// Takes the lock on `dir` (which must exist) or says who holds it.
    pub fn acquire(dir: &Path) -> Result<DataDirLock, StoreOpenError> {
        let path = dir.join(LOCK_FILE);
        let not_writable = |source| StoreOpenError::NotWritable {
            dir: dir.to_path_buf(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(not_writable)?;
        // SAFETY: flock(2) on a file descriptor we own for the call's duration.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            return Err(if e.kind() == std::io::ErrorKind::WouldBlock {
                StoreOpenError::DataDirInUse {
                    dir: dir.to_path_buf(),
                    pid: holder_pid(&mut file),
                }
            } else {
                StoreOpenError::Lock { path, source: e }
            });
        }
        file.set_len(0).map_err(not_writable)?;
        file.write_all(format!("{}\n", std::process::id()).as_bytes())
            .map_err(not_writable)?;
        Ok(DataDirLock { _file: file })
    }
}

/// `pid N` or `unknown pid`, for [`StoreOpenError::DataDirInUse`]'s text.
pub(crate) fn describe_pid(pid: &Option<u32>) -> String {
    match pid {
        Some(p) => format!("pid {p}"),
        None => "pid unknown".to_string(),
    }
}

/// The data directory's lock file.
pub fn lock_path(dir: &Path) -> PathBuf {
    dir.join(LOCK_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_dir_is_refused_naming_the_holder_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let first = DataDirLock::acquire(dir.path()).unwrap();
        let err = DataDirLock::acquire(dir.path()).unwrap_err();
        match &err {
            StoreOpenError::DataDirInUse { dir: d, pid } => {
                assert_eq!(d, dir.path());
                assert_eq!(*pid, Some(std::process::id()));
            }
            other => panic!("{other:?}"),
        }
        let text = err.to_string();
        assert!(
            text.contains(&format!(
                "relay data dir {} is in use by another relay (pid {})",
                dir.path().display(),
                std::process::id()
            )),
            "{text}"
        );
        drop(first);
        assert!(DataDirLock::acquire(dir.path()).is_ok(), "released on drop");
        assert!(lock_path(dir.path()).is_file());
    }
}
