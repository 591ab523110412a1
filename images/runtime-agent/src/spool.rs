//! The spool: one file per natural key, replaced atomically, within bounds, recovered
//! after a restart (collector-design.md §5 and §8 "After a container OOM";
//! runtime-agent-backend-contract.md §4 "Delivery semantics": one version per key,
//! "Acknowledgment is a durability promise", "Gaps are normal").
//!
//! - **Write:** `<name>.tmp` → write → fsync → rename over `<name>` → fsync the
//!   directory. The bytes on disk are the bytes a shipper sends. A crash before the
//!   rename leaves the previous version intact and a stale `.tmp` that the next start
//!   removes.
//! - **Names** are the natural keys: only `[A-Za-z0-9._-]`, never `.`/`..`, never
//!   ending in `.tmp` ([`SpoolError::BadName`]).
//! - **Delete = acknowledged:** [`Spool::acknowledge`] deletes a file only if it is
//!   unchanged since it was read for sending — (dev, inode, size, mtime) of the read
//!   equals a fresh `stat` — so a newer version written meanwhile survives. Writer and
//!   acknowledger both take `&mut Spool`, so the check and the rename never interleave.
//! - **Bounds** ([`Bounds`], defaults 24 h, 64 MiB, 2000 files): [`Spool::sweep`]
//!   removes files past the age bound, then the oldest mtime first until the size and
//!   count bounds hold, counting `evicted`; `*.tmp` older than 1 min are removed.
//! - **Damage:** a file that does not parse as the payload its name promises, or
//!   belongs to another pod, is moved to `quarantine/`, counted `damaged`, and never
//!   offered for shipping ([`Spool::load`]); the quarantine is bounded by the same age
//!   bound and [`QUARANTINE_MAX_FILES`].
//! - **Startup** ([`Spool::open`], in [`recover`]): remove stale `.tmp`; quarantine
//!   files that do not parse (never one that only failed to read); hand back
//!   unended-window snapshots for the rollup to merge; promote snapshots whose window
//!   ended meanwhile to `usage_window` (unless the window's final file exists, which
//!   beats them); report `previous_run` from `state/alive` and `state/clean` (`state/`
//!   is never shipped). Only creating or listing the directories is fatal; every other
//!   failure (a full disk) degrades and is reported in [`Recovery::degraded`].

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use crate::payload::{self, Kind, SpoolCoverage};

mod recover;

pub use recover::{AtOpen, Degraded, Recovery, Step, at_open};

/// Temp-file suffix.
pub const TMP_SUFFIX: &str = ".tmp";
/// Most quarantined files kept.
pub const QUARANTINE_MAX_FILES: usize = 100;
/// `*.tmp` older than this is a dead write.
pub const TMP_MAX_AGE_SECS: u64 = 60;

/// Spool bounds (design §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub max_age_secs: u64,
    pub max_bytes: u64,
    pub max_files: u64,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            max_age_secs: 24 * 3600,
            max_bytes: 64 * 1024 * 1024,
            max_files: 2000,
        }
    }
}

/// Spool errors.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("spool file name {0:?} is not a natural key name")]
    BadName(String),
    #[error("spool I/O on {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> SpoolError + '_ {
    move |source| SpoolError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Check a spool file name.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.ends_with(TMP_SUFFIX)
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

/// What identifies one version of a file on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileIdentity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

impl FileIdentity {
    fn of(meta: &fs::Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        }
    }
}

/// A spooled file listed for shipping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub bytes: u64,
    pub mtime_secs: u64,
}

/// A file read for sending: its bytes, its kind and the identity of the version read.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub kind: Kind,
    pub bytes: Vec<u8>,
    pub identity: FileIdentity,
}

/// A write that reached disk as `<name>.tmp` and awaits its rename.
#[derive(Debug)]
pub struct Staged {
    tmp: PathBuf,
    target: PathBuf,
    dir: PathBuf,
}

impl Staged {
    /// Rename over the target and fsync the directory.
    pub fn commit(self) -> Result<(), SpoolError> {
        fs::rename(&self.tmp, &self.target).map_err(io_err(&self.target))?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err(&self.dir))
    }
}

/// The spool directory.
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    pod_uid: String,
    bounds: Bounds,
    evicted: u64,
    damaged: u64,
    write_errors: u64,
}

fn mtime_secs(meta: &fs::Metadata) -> u64 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs())
}

fn remove_if_present(path: &Path) -> Result<bool, SpoolError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(SpoolError::Io {
            path: path.to_owned(),
            source: e,
        }),
    }
}

impl Spool {
    /// The spool directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn top_level_files(&self) -> Result<Vec<(String, fs::Metadata)>, SpoolError> {
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(io_err(&self.dir))? {
            let entry = entry.map_err(io_err(&self.dir))?;
            let Ok(meta) = entry.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            out.push((entry.file_name().to_string_lossy().into_owned(), meta));
        }
        Ok(out)
    }

    fn write_raw(&self, dir: &Path, name: &str, bytes: &[u8]) -> Result<(), SpoolError> {
        self.stage_in(dir, name, bytes)?.commit()
    }

    fn stage_in(&self, dir: &Path, name: &str, bytes: &[u8]) -> Result<Staged, SpoolError> {
        let tmp = dir.join(format!("{name}{TMP_SUFFIX}"));
        let result = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()));
        if let Err(e) = result {
            let _ = fs::remove_file(&tmp);
            return Err(SpoolError::Io { path: tmp, source: e });
        }
        Ok(Staged {
            tmp,
            target: dir.join(name),
            dir: dir.to_owned(),
        })
    }

    /// Write `<name>.tmp` and fsync it, without renaming (the first half of a write).
    pub fn stage(&self, name: &str, bytes: &[u8]) -> Result<Staged, SpoolError> {
        if !valid_name(name) {
            return Err(SpoolError::BadName(name.to_owned()));
        }
        self.stage_in(&self.dir, name, bytes)
    }

    /// Replace `name` atomically with `bytes`. A failure is counted in `write_errors`
    /// and leaves the previous version in place.
    pub fn write(&mut self, name: &str, bytes: &[u8]) -> Result<(), SpoolError> {
        let result = self.stage(name, bytes).and_then(Staged::commit);
        if matches!(result, Err(SpoolError::Io { .. })) {
            self.write_errors += 1;
        }
        result
    }

    /// Remove `name` (absent is fine).
    pub fn remove(&mut self, name: &str) -> Result<(), SpoolError> {
        if !valid_name(name) {
            return Err(SpoolError::BadName(name.to_owned()));
        }
        remove_if_present(&self.dir.join(name)).map(|_| ())
    }

    fn quarantine(&mut self, name: &str) -> Result<(), SpoolError> {
        let from = self.dir.join(name);
        // Keep the name readable but harmless inside quarantine/.
        let safe: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let to = self
            .dir
            .join("quarantine")
            .join(if safe.is_empty() || safe == "." || safe == ".." {
                "unnamed".to_owned()
            } else {
                safe
            });
        fs::rename(&from, &to).map_err(io_err(&from))?;
        self.damaged += 1;
        Ok(())
    }

    /// The shippable files, oldest mtime first (ties by name).
    pub fn entries(&self) -> Result<Vec<Entry>, SpoolError> {
        let mut out: Vec<Entry> = self
            .top_level_files()?
            .into_iter()
            .filter(|(name, _)| valid_name(name))
            .map(|(name, meta)| Entry {
                name,
                bytes: meta.size(),
                mtime_secs: mtime_secs(&meta),
            })
            .collect();
        out.sort_by(|a, b| a.mtime_secs.cmp(&b.mtime_secs).then_with(|| a.name.cmp(&b.name)));
        Ok(out)
    }

    /// Read `name` for sending. A damaged file is quarantined, counted and never
    /// returned; a file gone meanwhile is `None`.
    pub fn load(&mut self, name: &str) -> Result<Option<Loaded>, SpoolError> {
        if !valid_name(name) {
            return Err(SpoolError::BadName(name.to_owned()));
        }
        let path = self.dir.join(name);
        let mut file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(SpoolError::Io { path, source: e }),
        };
        let meta = file.metadata().map_err(io_err(&path))?;
        let mut bytes = Vec::with_capacity(meta.size() as usize);
        io::Read::read_to_end(&mut file, &mut bytes).map_err(io_err(&path))?;
        match payload::parse_spooled(name, &bytes, &self.pod_uid) {
            Ok(parsed) => Ok(Some(Loaded {
                kind: parsed.kind(),
                bytes,
                identity: FileIdentity::of(&meta),
            })),
            Err(_) => {
                self.quarantine(name)?;
                Ok(None)
            }
        }
    }

    /// The identity of the version of `name` on disk now (`None` if it is gone), for
    /// holding a file without reading it.
    pub fn identity(&self, name: &str) -> Result<Option<FileIdentity>, SpoolError> {
        if !valid_name(name) {
            return Err(SpoolError::BadName(name.to_owned()));
        }
        let path = self.dir.join(name);
        match fs::metadata(&path) {
            Ok(meta) => Ok(Some(FileIdentity::of(&meta))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(SpoolError::Io { path, source: e }),
        }
    }

    /// After a 2xx: delete `name` if it is still the version that was sent. Returns
    /// whether it was deleted.
    pub fn acknowledge(&mut self, name: &str, sent: FileIdentity) -> Result<bool, SpoolError> {
        if !valid_name(name) {
            return Err(SpoolError::BadName(name.to_owned()));
        }
        let path = self.dir.join(name);
        match fs::metadata(&path) {
            Ok(meta) if FileIdentity::of(&meta) == sent => remove_if_present(&path),
            Ok(_) => Ok(false),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(SpoolError::Io { path, source: e }),
        }
    }

    /// Enforce the bounds at `now_secs`; returns how many files were evicted.
    pub fn sweep(&mut self, now_secs: u64) -> Result<u64, SpoolError> {
        let mut files: Vec<(String, u64, u64)> = Vec::new();
        for (name, meta) in self.top_level_files()? {
            let age = now_secs.saturating_sub(mtime_secs(&meta));
            if name.ends_with(TMP_SUFFIX) {
                if age > TMP_MAX_AGE_SECS {
                    remove_if_present(&self.dir.join(&name))?;
                }
                continue;
            }
            files.push((name, meta.size(), mtime_secs(&meta)));
        }
        files.sort_by(|a, b| a.2.cmp(&b.2).then_with(|| a.0.cmp(&b.0)));
        let mut count = files.len() as u64;
        let mut bytes: u64 = files.iter().map(|f| f.1).sum();
        let mut evicted = 0;
        for (name, size, mtime) in files {
            let too_old = now_secs.saturating_sub(mtime) > self.bounds.max_age_secs;
            if !too_old && count <= self.bounds.max_files && bytes <= self.bounds.max_bytes {
                break;
            }
            if remove_if_present(&self.dir.join(&name))? {
                evicted += 1;
            }
            count -= 1;
            bytes -= size;
        }
        self.evicted += evicted;
        self.sweep_quarantine(now_secs)?;
        Ok(evicted)
    }

    fn sweep_quarantine(&mut self, now_secs: u64) -> Result<(), SpoolError> {
        let dir = self.dir.join("quarantine");
        let mut files: Vec<(PathBuf, u64)> = fs::read_dir(&dir)
            .map_err(io_err(&dir))?
            .filter_map(Result::ok)
            .filter_map(|e| {
                e.metadata()
                    .ok()
                    .filter(|m| m.is_file())
                    .map(|m| (e.path(), mtime_secs(&m)))
            })
            .collect();
        files.sort_by_key(|f| f.1);
        let excess = files.len().saturating_sub(QUARANTINE_MAX_FILES);
        for (i, (path, mtime)) in files.iter().enumerate() {
            if i < excess || now_secs.saturating_sub(*mtime) > self.bounds.max_age_secs {
                remove_if_present(path)?;
            }
        }
        Ok(())
    }

    /// Write `state/clean` after the final flush (design §8).
    pub fn mark_clean(&self) -> Result<(), SpoolError> {
        self.write_raw(&self.dir.join("state"), "clean", b"")
    }

    /// The coverage block `spool`.
    pub fn coverage(&self) -> SpoolCoverage {
        let entries = self.entries().unwrap_or_default();
        SpoolCoverage {
            files: entries.len() as u64,
            bytes: entries.iter().map(|e| e.bytes).sum(),
            evicted: self.evicted,
            damaged: self.damaged,
            write_errors: self.write_errors,
        }
    }
}
