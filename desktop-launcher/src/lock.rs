//! Advisory file locks in the state dir (`locks/`), the one way launcher
//! processes and the Start page's threads serialise an operation on shared
//! state (review b30b1a0 finding 1 "`ensure_running` is not serialised",
//! finding 9, and the code-quality note on read-modify-write of the deploy
//! state):
//!
//! | lock | held across | by |
//! |---|---|---|
//! | `relay.lock` | the embedded relay's check, spawn and wait | [`crate::embedded::ensure_running`], [`crate::embedded::stop`] |
//! | `relay-state.lock` | one read-modify-write of `relay.json` | [`crate::embedded`] |
//! | `agent-<name>.lock` | a start's check-and-spawn (local) or deploy (provider) | [`crate::app`] |
//! | `deploy-<name>.lock` | one read-modify-write of `deploy/<name>.json` | [`crate::store::Store::update_deploy_state`] |
//!
//! `flock(2)` locks belong to an open file description: two threads that
//! each open the file exclude each other as two processes do, and a lock
//! ends with its holder (a crashed launcher never leaves one behind). The
//! lock files themselves are never removed (removing one while another
//! process waits on it would let a third take a fresh one).

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// A held lock; dropping it releases it.
#[derive(Debug)]
pub struct Held {
    _file: File,
}

/// A lock failure (never "busy": see [`try_lock`]).
#[derive(Debug, thiserror::Error)]
#[error("cannot lock {path}: {source}")]
pub struct LockError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

fn open(path: &Path) -> Result<File, LockError> {
    let err = |source| LockError {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(err)
}

fn flock(file: &File, op: i32) -> std::io::Result<()> {
    loop {
        // SAFETY: flock(2) on an fd this function borrows; no memory is involved.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Takes the exclusive lock at `path`, waiting for its holder.
pub fn lock(path: &Path) -> Result<Held, LockError> {
    let file = open(path)?;
    flock(&file, libc::LOCK_EX).map_err(|source| LockError {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(Held { _file: file })
}

/// Takes the exclusive lock at `path` if nobody holds it (`None` when held).
pub fn try_lock(path: &Path) -> Result<Option<Held>, LockError> {
    let file = open(path)?;
    match flock(&file, libc::LOCK_EX | libc::LOCK_NB) {
        Ok(()) => Ok(Some(Held { _file: file })),
        Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Ok(None),
        Err(source) => Err(LockError {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// [`try_lock`] for up to `patience`: a lock whose holder just released it
/// can stay held for a moment by a child process another thread is forking
/// (the child shares the descriptor until its `exec` closes it), so "held"
/// means held across `patience`, not at one instant.
pub fn try_lock_for(path: &Path, patience: std::time::Duration) -> Result<Option<Held>, LockError> {
    let end = std::time::Instant::now() + patience;
    loop {
        if let Some(held) = try_lock(path)? {
            return Ok(Some(held));
        }
        if std::time::Instant::now() >= end {
            return Ok(None);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_excludes_another_holder_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("locks/x.lock");
        let first = lock(&p).unwrap();
        assert!(
            try_lock(&p).unwrap().is_none(),
            "a second open description must wait"
        );
        // Another thread blocks until the first is dropped.
        let (tx, rx) = std::sync::mpsc::channel();
        let p2 = p.clone();
        let t = std::thread::spawn(move || {
            let held = lock(&p2).unwrap();
            tx.send(()).unwrap();
            drop(held);
        });
        assert!(rx.try_recv().is_err());
        drop(first);
        rx.recv().unwrap();
        t.join().unwrap();
        assert!(try_lock(&p).unwrap().is_some());
    }
}
