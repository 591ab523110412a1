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
//! relay never leaves a stale lock. The pid written into the file names
//! the holder in the error message.
//!
//! It also tells one transient case apart. A child this process spawns
//! shares every open file description between its fork and its exec
//! (`O_CLOEXEC` closes them only at the exec), the lock's included; so a
//! store dropped just as another thread spawns a process can keep its lock
//! for that window, and reopening the directory at once would be refused
//! by a lock nobody holds any more. A lock held under this process's own
//! pid is therefore waited for up to [`OWN_RELEASE_WAIT`] before the
//! refusal; one held by another pid is refused at once.

use super::log_store::StoreOpenError;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The lock file's name inside the data directory.
pub const LOCK_FILE: &str = "LOCK";

/// How long a lock held under this process's own pid is waited for (see
/// the module doc), and the step of the wait.
const OWN_RELEASE_WAIT: Duration = Duration::from_secs(1);
const OWN_RELEASE_STEP: Duration = Duration::from_millis(20);

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
        let own_pid = std::process::id();
        let mut waited = Duration::ZERO;
        loop {
            // SAFETY: flock(2) on a file descriptor we own for the call's duration.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc == 0 {
                break;
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::WouldBlock {
                return Err(StoreOpenError::Lock { path, source: e });
            }
            let pid = holder_pid(&mut file);
            // Our own pid: a store of this process, or one just dropped
            // whose lock a child spawned meanwhile still shares until it
            // execs (see the module doc). Only the first is worth the error.
            if pid != Some(own_pid) || waited >= OWN_RELEASE_WAIT {
                return Err(StoreOpenError::DataDirInUse {
                    dir: dir.to_path_buf(),
                    pid,
                });
            }
            std::thread::sleep(OWN_RELEASE_STEP);
            waited += OWN_RELEASE_STEP;
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

    /// A child spawned while the lock was held shares it until its exec:
    /// the lock dropped meanwhile is taken once the child execs, not
    /// refused (red without the wait on this process's own pid).
    #[test]
    fn a_lock_a_spawning_child_still_shares_is_taken_once_it_execs() {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().unwrap();
        let first = DataDirLock::acquire(dir.path()).unwrap();
        // Spawned from another thread, as a relay's neighbours do: `spawn`
        // returns only after the exec, and the fork happens at once.
        let spawner = std::thread::spawn(|| {
            let mut cmd = std::process::Command::new("true");
            // SAFETY: the hook only sleeps (nanosleep is async-signal-safe),
            // holding the child between its fork and its exec.
            unsafe {
                cmd.pre_exec(|| {
                    std::thread::sleep(Duration::from_millis(400));
                    Ok(())
                });
            }
            cmd.status().unwrap()
        });
        std::thread::sleep(Duration::from_millis(150));
        drop(first);
        let again = DataDirLock::acquire(dir.path());
        assert!(spawner.join().unwrap().success());
        assert!(again.is_ok(), "{:?}", again.err());
    }
}
