//! Sealed staging of a provider binary (spec §Discovery "Pre-secret
//! negotiation gate": the nsec goes to the exact bytes that answered `info`).
//!
//! # Design
//!
//! The discovered file is copied once into an anonymous in-memory file
//! (`memfd_create`, Linux), which is then **sealed** with `F_SEAL_WRITE`,
//! `F_SEAL_SHRINK`, `F_SEAL_GROW` and `F_SEAL_SEAL`. Only then is it hashed,
//! by reading the sealed file back. From that moment the kernel refuses every
//! write, truncation and growth of those bytes, to every process, including
//! the launcher and root. `info` and `deploy` both execute that same file
//! descriptor (`/proc/self/fd/<n>` in the child, which the kernel resolves to
//! the sealed file), so the bytes that run are provably the bytes whose
//! digest the launcher prints and checks. There is no staging path on disk
//! to rename over, and nothing is left behind by a crash: the memory file
//! dies with the launcher. The copy is capped at [`STAGED_MAX_BYTES`].
//!
//! # Threat model
//!
//! - **The provider itself and other processes of the same user.** They can
//!   replace or rewrite the discovered path, the source file, or try to write
//!   `/proc/self/exe` during `info`: none of this changes what `deploy` runs
//!   (the seals make every write fail with `EPERM`). What this does *not*
//!   claim: a same-user process can also read the launcher's `0600` key files
//!   or debug the launcher (`ptrace`, where the system permits it); the gate
//!   protects which bytes receive the nsec against replacement and races, it
//!   is not a sandbox against hostile code already running as the user.
//! - **Other users.** They cannot open the launcher's descriptors or its
//!   state. If the discovered path lives in a directory they can write, they
//!   can choose *which* bytes get staged; the printed digest names them, and
//!   strict mode (`providers approve`) refuses any digest not approved.
//! - **`#!` interpreters and shared libraries.** The digest covers the staged
//!   file only. For a script that is the script text: the kernel hands the
//!   interpreter the path `/proc/self/fd/<n>`, which it re-opens, still the
//!   sealed bytes (this is why the descriptor is inherited by the child and
//!   why `/proc` must be mounted). The interpreter named on the `#!` line
//!   (and, through `/usr/bin/env`, whatever `PATH` selects), the modules it
//!   loads, and an ELF binary's dynamic loader and libraries are resolved
//!   from the file system at exec time and are not covered.
//!
//! On systems without `memfd_create` staging fails closed: no fallback to a
//! path or metadata check is taken silently (spec §Discovery).

use crate::limits::STAGED_MAX_BYTES;
use sha2::{Digest, Sha256};
use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Why a provider could not be staged. Names the file, never its bytes.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error("cannot read it: {0}")]
    Read(std::io::Error),
    #[error("it is not a regular file")]
    NotFile,
    #[error("it is larger than the {max}-byte cap on a staged provider")]
    TooLarge { max: u64 },
    #[error("cannot create the sealed in-memory copy: {0}")]
    Memfd(std::io::Error),
    #[error("cannot seal the in-memory copy: {0}")]
    Seal(std::io::Error),
    #[error("sealed staging needs Linux (memfd_create); refusing to run an unsealed copy")]
    Unsupported,
}

/// A sealed in-memory copy of a provider binary and the digest of exactly
/// those bytes.
#[derive(Debug)]
pub struct Staged {
    fd: OwnedFd,
    /// SHA-256 of the sealed bytes, lowercase hex.
    pub sha256: String,
    /// Size of the sealed bytes.
    pub len: u64,
    /// Where it was copied from.
    pub source: PathBuf,
    /// `argv[0]` for the child: the discovered file name.
    pub name: OsString,
}

impl Staged {
    /// A command that executes the sealed bytes. The descriptor is made
    /// inheritable in the child only (so a `#!` interpreter can re-open it);
    /// the parent keeps it close-on-exec.
    pub fn command(&self) -> Command {
        let fd = self.fd.as_raw_fd();
        let mut cmd = Command::new(format!("/proc/self/fd/{fd}"));
        cmd.arg0(&self.name);
        // SAFETY: the closure only calls fcntl, which is async-signal-safe,
        // on a descriptor number copied into the closure.
        unsafe {
            cmd.pre_exec(move || {
                if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd
    }

    /// The seals in force on the staged file (for tests and diagnostics).
    pub fn seals(&self) -> std::io::Result<i32> {
        // SAFETY: F_GET_SEALS reads flags of a descriptor we own.
        let r = unsafe { libc::fcntl(self.fd.as_raw_fd(), libc::F_GET_SEALS) };
        if r == -1 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(r)
        }
    }
}

/// Every seal the staged file carries.
pub const SEALS: i32 = libc::F_SEAL_WRITE | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

#[cfg(target_os = "linux")]
fn memfd(name: &std::ffi::CStr) -> Result<OwnedFd, StageError> {
    let base = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // MFD_EXEC keeps the copy executable where `vm.memfd_noexec` defaults to
    // no-exec; kernels older than 6.3 reject the flag, so retry without it.
    for flags in [base | libc::MFD_EXEC, base] {
        // SAFETY: `name` is a valid C string; the result is a new descriptor or -1.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), flags) };
        if fd >= 0 {
            // SAFETY: fd is a fresh descriptor we own.
            let owned = unsafe { OwnedFd::from_raw_fd(fd) };
            return above_stdio(owned);
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(StageError::Memfd(e));
        }
    }
    Err(StageError::Memfd(std::io::Error::from_raw_os_error(libc::EINVAL)))
}

/// Moves a descriptor to a number ≥ 3, so the child's stdio setup can never
/// overwrite it when the launcher itself was started with a closed stdio fd.
#[cfg(target_os = "linux")]
fn above_stdio(fd: OwnedFd) -> Result<OwnedFd, StageError> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: duplicating a descriptor we own; the original is closed on drop.
    let dup = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if dup == -1 {
        return Err(StageError::Memfd(std::io::Error::last_os_error()));
    }
    // SAFETY: dup is a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(dup) })
}

/// Adds [`SEALS`]. `F_SEAL_WRITE` fails with `EBUSY` while the kernel
/// still holds a transient reference to one of the file's pages (it waits
/// about 150 ms for them to go); nobody else has this descriptor, so no
/// write can come meanwhile, and the seal is tried again a few times.
/// (A fast release build's Start failed once this way.)
#[cfg(target_os = "linux")]
fn seal(copy: &File) -> Result<(), StageError> {
    const ATTEMPTS: u32 = 10;
    let mut attempt = 1;
    loop {
        // SAFETY: F_ADD_SEALS on a descriptor we own.
        if unsafe { libc::fcntl(copy.as_raw_fd(), libc::F_ADD_SEALS, SEALS) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EBUSY) || attempt == ATTEMPTS {
            return Err(StageError::Seal(e));
        }
        attempt += 1;
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Copies `from` into `to` through a buffer of this process, not with
/// `std::io::copy`, which between files lets the kernel move the pages
/// (`copy_file_range`, `sendfile`): the fewer kernel references to the
/// copy's pages, the fewer `EBUSY`s at [`seal`].
#[cfg(target_os = "linux")]
fn copy_through_buffer(from: &mut impl Read, to: &mut File) -> Result<u64, StageError> {
    let mut buf = vec![0u8; 1024 * 1024];
    let mut copied = 0u64;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(copied),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(StageError::Read(e)),
        };
        to.write_all(&buf[..n]).map_err(StageError::Read)?;
        copied += n as u64;
    }
}

/// Copies `source` into a sealed in-memory file, then hashes the sealed bytes.
#[cfg(target_os = "linux")]
pub fn stage(source: &Path) -> Result<Staged, StageError> {
    let mut src = File::open(source).map_err(StageError::Read)?;
    let meta = src.metadata().map_err(StageError::Read)?;
    if !meta.is_file() {
        return Err(StageError::NotFile);
    }
    if meta.len() > STAGED_MAX_BYTES {
        return Err(StageError::TooLarge {
            max: STAGED_MAX_BYTES,
        });
    }
    let name: OsString = source
        .file_name()
        .map_or_else(|| "buzz-backend".into(), |n| n.to_os_string());
    let label = std::ffi::CString::new(name.as_encoded_bytes().to_vec())
        .unwrap_or_else(|_| c"buzz-backend".to_owned());
    let mut copy = File::from(memfd(&label)?);
    // The source may grow while it is read: the cap holds on what is copied.
    let copied = copy_through_buffer(&mut (&mut src).take(STAGED_MAX_BYTES + 1), &mut copy)?;
    if copied > STAGED_MAX_BYTES {
        return Err(StageError::TooLarge {
            max: STAGED_MAX_BYTES,
        });
    }
    seal(&copy)?;
    // Hash what is sealed, not what was read: these are the bytes that run.
    copy.seek(SeekFrom::Start(0)).map_err(StageError::Read)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1024 * 1024];
    let mut len = 0u64;
    loop {
        let n = copy.read(&mut buf).map_err(StageError::Read)?;
        if n == 0 {
            break;
        }
        len += n as u64;
        hasher.update(&buf[..n]);
    }
    Ok(Staged {
        fd: OwnedFd::from(copy),
        sha256: hex::encode(hasher.finalize()),
        len,
        source: source.to_path_buf(),
        name,
    })
}

/// Sealed staging is Linux-only; elsewhere it fails closed.
#[cfg(not(target_os = "linux"))]
pub fn stage(_source: &Path) -> Result<Staged, StageError> {
    Err(StageError::Unsupported)
}

/// Removes staging directories an older launcher (which staged into files)
/// left behind when it crashed. Entries younger than `min_age` are kept, in
/// case such a launcher is still running. Errors are ignored: this is tidying.
pub fn collect_leftovers(staging_root: &Path, min_age: std::time::Duration) {
    let Ok(entries) = std::fs::read_dir(staging_root) else {
        return;
    };
    let now = std::time::SystemTime::now();
    for e in entries.flatten() {
        let Ok(meta) = e.metadata() else { continue };
        let old = meta
            .modified()
            .ok()
            .and_then(|m| now.duration_since(m).ok())
            .is_some_and(|age| age >= min_age);
        if !old {
            continue;
        }
        let path = e.path();
        if meta.is_dir() {
            // A previous launcher left its files read-only (0500).
            make_writable(&path);
            let _ = std::fs::remove_dir_all(&path);
        } else {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Makes `dir` and the real directories under it writable so that
/// `remove_dir_all` can empty them. Removing a file needs write permission on
/// its directory only, so files keep their mode. A symlink is never followed:
/// `chmod` through it would change its target, which may lie outside the
/// staging root.
fn make_writable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        // `DirEntry::file_type` does not follow a symlink.
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            make_writable(&e.path());
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn staged_bytes_are_sealed_hashed_and_independent_of_the_source() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("buzz-backend-x");
        std::fs::write(&src, b"#!/bin/sh\necho hi\n").unwrap();
        let staged = stage(&src).unwrap();
        assert_eq!(
            staged.sha256,
            hex::encode(Sha256::digest(b"#!/bin/sh\necho hi\n"))
        );
        assert_eq!(staged.len, 18);
        assert_eq!(staged.seals().unwrap() & SEALS, SEALS);
        assert_eq!(staged.name, "buzz-backend-x");
        std::fs::write(&src, b"changed").unwrap();
        // Nobody can write the sealed copy, not even through a fresh open.
        let path = format!("/proc/self/fd/{}", staged.fd.as_raw_fd());
        let refused = match std::fs::OpenOptions::new().write(true).open(&path) {
            Err(e) => e.raw_os_error(),
            Ok(mut w) => w.write_all(b"evil").err().and_then(|e| e.raw_os_error()),
        };
        assert_eq!(refused, Some(libc::EPERM));
        let back = std::fs::read(&path).unwrap();
        assert_eq!(back, b"#!/bin/sh\necho hi\n");
    }

    #[test]
    fn staging_refuses_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(stage(dir.path()), Err(StageError::NotFile)));
    }

    #[test]
    fn leftovers_older_than_the_bound_are_collected_younger_ones_kept() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("old");
        std::fs::create_dir(&old).unwrap();
        std::fs::write(old.join("buzz-backend-x"), b"x").unwrap();
        std::fs::set_permissions(old.join("buzz-backend-x"), std::fs::Permissions::from_mode(0o500)).unwrap();
        let past = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        File::open(&old).unwrap().set_modified(past).unwrap();
        let young = dir.path().join("young");
        std::fs::create_dir(&young).unwrap();
        collect_leftovers(dir.path(), std::time::Duration::from_secs(600));
        assert!(!old.exists());
        assert!(young.exists());
    }

    #[test]
    fn leftover_cleanup_never_follows_a_symlink() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("precious");
        std::fs::write(&target, b"keep").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o400)).unwrap();
        let target_dir = outside.path().join("dir");
        std::fs::create_dir(&target_dir).unwrap();
        std::fs::set_permissions(&target_dir, std::fs::Permissions::from_mode(0o555)).unwrap();

        let old = dir.path().join("old");
        std::fs::create_dir_all(old.join("nested")).unwrap();
        std::os::unix::fs::symlink(&target, old.join("link")).unwrap();
        std::os::unix::fs::symlink(&target_dir, old.join("nested").join("dirlink")).unwrap();
        std::fs::set_permissions(old.join("nested"), std::fs::Permissions::from_mode(0o500)).unwrap();
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o500)).unwrap();
        let past = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        File::open(&old).unwrap().set_modified(past).unwrap();

        collect_leftovers(dir.path(), std::time::Duration::from_secs(600));
        assert!(
            !old.exists(),
            "the old entry, nested directory and all, is removed"
        );
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&target), 0o400, "a symlink's target keeps its mode");
        assert_eq!(mode(&target_dir), 0o555, "a symlinked directory keeps its mode");
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    }
}
