//! Opening and recovering the spool after a restart (collector-design.md §5
//! "Startup", §8 "After a container OOM"; review b30b1a0 finding 15: a read error is
//! not damage, and a full disk must not stop the collector).
//!
//! [`at_open`] is the pure rule for one top-level file: a stale `.tmp` is removed; a
//! file whose name is no natural key, or whose bytes do not parse as the payload its
//! name promises (or belong to another pod), is quarantined; a file that could not be
//! *read* (EIO, EACCES, ENOMEM …) is left where it is, counted `unreadable`, and read
//! again when the shipper offers it — moving it away would take unshipped data out of
//! shipping for good on a transient error; a parsed file is kept (and, when it is an
//! unended snapshot, resumed).
//!
//! [`Spool::open`] fails only when the spool directories cannot be created or listed.
//! Everything else — writing `state/alive`, clearing `state/clean`, a quarantine
//! rename, promoting an ended snapshot, the first sweep — degrades: the step is
//! skipped, reported in [`Recovery::degraded`] for the binary to log, and the
//! collector runs on (on a full disk it keeps collecting in memory and ships what is
//! already spooled). A snapshot whose promotion failed stays as it is, still
//! shippable.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::{Bounds, Spool, SpoolError, TMP_SUFFIX, io_err, remove_if_present, valid_name};
use crate::payload::{self, Kind, PreviousRun, Spooled, UsagePayload};

/// What [`Spool::open`] does with one top-level file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AtOpen {
    /// A stale temp file of an interrupted write: remove it.
    RemoveTmp,
    /// Not a natural-key name, or bytes that do not parse: move to `quarantine/`.
    Quarantine,
    /// It could not be read (this error): leave it for a later read.
    LeaveForLater(io::ErrorKind),
    /// Gone since it was listed.
    Gone,
    /// A valid spool file.
    Keep(Box<Spooled>),
}

/// The rule for one file named `name`, given what reading it gave (not consulted for
/// temp files and bad names).
pub fn at_open(name: &str, read: impl FnOnce() -> io::Result<Vec<u8>>, pod_uid: &str) -> AtOpen {
    if name.ends_with(TMP_SUFFIX) {
        return AtOpen::RemoveTmp;
    }
    if !valid_name(name) {
        return AtOpen::Quarantine;
    }
    match read() {
        Err(e) if e.kind() == io::ErrorKind::NotFound => AtOpen::Gone,
        Err(e) => AtOpen::LeaveForLater(e.kind()),
        Ok(bytes) => match payload::parse_spooled(name, &bytes, pod_uid) {
            Ok(spooled) => AtOpen::Keep(Box::new(spooled)),
            Err(_) => AtOpen::Quarantine,
        },
    }
}

/// A recovery step that was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Writing `state/alive` (so the next start cannot tell an unclean run).
    MarkAlive,
    /// Removing the previous run's `state/clean`.
    ClearClean,
    /// Reading a spool file (left for a later read).
    Read,
    /// Removing a stale temp file.
    RemoveTmp,
    /// Moving a damaged file to `quarantine/`.
    Quarantine,
    /// Promoting an ended snapshot to its window.
    Promote,
    /// The first bounds sweep.
    Sweep,
}

impl Step {
    fn describe(self) -> &'static str {
        match self {
            Step::MarkAlive => "cannot write state/alive (the next start will not see this run)",
            Step::ClearClean => "cannot remove state/clean",
            Step::Read => "cannot read a spool file (left for a later read)",
            Step::RemoveTmp => "cannot remove a stale temp file",
            Step::Quarantine => "cannot quarantine a damaged file",
            Step::Promote => "cannot promote an ended snapshot (kept as a snapshot)",
            Step::Sweep => "cannot sweep the spool bounds",
        }
    }
}

/// One degraded step of [`Spool::open`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Degraded {
    pub step: Step,
    pub path: PathBuf,
    pub error: io::ErrorKind,
}

impl fmt::Display for Degraded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} ({})",
            self.step.describe(),
            self.path.display(),
            self.error
        )
    }
}

/// What [`Spool::open`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    pub previous_run: PreviousRun,
    /// Snapshots of windows that have not ended: merge them back into the rollup.
    pub resumed: Vec<UsagePayload>,
    /// Snapshots whose window ended while no collector ran, promoted to `usage_window`.
    pub promoted: u64,
    pub stale_tmp_removed: u64,
    pub damaged: u64,
    /// Files that could not be read and were left in place.
    pub unreadable: u64,
    /// Steps skipped because of an I/O error; the spool works without them.
    pub degraded: Vec<Degraded>,
}

impl Recovery {
    fn degrade(&mut self, step: Step, e: SpoolError, fallback: &Path) {
        let (path, error) = match e {
            SpoolError::Io { path, source } => (path, source.kind()),
            SpoolError::BadName(_) => (fallback.to_owned(), io::ErrorKind::InvalidInput),
        };
        self.degraded.push(Degraded { step, path, error });
    }
}

impl Spool {
    /// Open (creating) the spool at `dir` for the pod `pod_uid` and recover it at
    /// `now_secs`. Only creating or listing the directories fails; see the module doc.
    pub fn open(
        dir: &Path,
        pod_uid: &str,
        bounds: Bounds,
        now_secs: u64,
    ) -> Result<(Self, Recovery), SpoolError> {
        for sub in ["", "state", "quarantine"] {
            let path = dir.join(sub);
            fs::create_dir_all(&path).map_err(io_err(&path))?;
        }
        let mut spool = Spool {
            dir: dir.to_owned(),
            pod_uid: pod_uid.to_owned(),
            bounds,
            evicted: 0,
            damaged: 0,
            write_errors: 0,
        };
        let state = dir.join("state");
        let previous_run = match (state.join("alive").exists(), state.join("clean").exists()) {
            (false, _) => PreviousRun::None,
            (true, true) => PreviousRun::Clean,
            (true, false) => PreviousRun::Unclean,
        };
        let mut recovery = Recovery {
            previous_run,
            resumed: Vec::new(),
            promoted: 0,
            stale_tmp_removed: 0,
            damaged: 0,
            unreadable: 0,
            degraded: Vec::new(),
        };
        if let Err(e) = remove_if_present(&state.join("clean")) {
            recovery.degrade(Step::ClearClean, e, &state);
        }
        if let Err(e) = spool.write_raw(&state, "alive", b"") {
            spool.write_errors += 1;
            recovery.degrade(Step::MarkAlive, e, &state);
        }

        let mut names: Vec<String> = spool.top_level_files()?.into_iter().map(|(n, _)| n).collect();
        names.sort();
        for name in names {
            let path = dir.join(&name);
            match at_open(&name, || fs::read(&path), pod_uid) {
                AtOpen::RemoveTmp => match remove_if_present(&path) {
                    Ok(_) => recovery.stale_tmp_removed += 1,
                    Err(e) => recovery.degrade(Step::RemoveTmp, e, &path),
                },
                AtOpen::LeaveForLater(error) => {
                    recovery.unreadable += 1;
                    recovery.degraded.push(Degraded {
                        step: Step::Read,
                        path: path.clone(),
                        error,
                    });
                }
                AtOpen::Quarantine => match spool.quarantine(&name) {
                    Ok(()) => recovery.damaged += 1,
                    Err(e) => recovery.degrade(Step::Quarantine, e, &path),
                },
                AtOpen::Keep(spooled) => {
                    let Spooled::Usage(p) = *spooled else { continue };
                    if p.kind != Kind::UsageSnapshot {
                        continue;
                    }
                    let start = crate::time::parse_rfc3339(&p.window_start).unwrap_or_default();
                    if start.saturating_add(p.window_seconds) > now_secs {
                        recovery.resumed.push(p);
                        continue;
                    }
                    match spool.promote(&name, p, start) {
                        Ok(true) => recovery.promoted += 1,
                        Ok(false) => {}
                        Err(e) => recovery.degrade(Step::Promote, e, &path),
                    }
                }
                AtOpen::Gone => {}
            }
        }
        if let Err(e) = spool.sweep(now_secs) {
            recovery.degrade(Step::Sweep, e, dir);
        }
        Ok((spool, recovery))
    }

    /// Replace the ended snapshot `name` by its window (unless the window's final
    /// file exists, which beats it); whether the window was written. On a failed
    /// write the snapshot stays.
    fn promote(&mut self, name: &str, p: UsagePayload, start: u64) -> Result<bool, SpoolError> {
        let final_name = payload::usage_file_name(Kind::UsageWindow, start, p.window_seconds);
        let write = !self.dir.join(&final_name).exists();
        if write {
            let promoted = UsagePayload {
                kind: Kind::UsageWindow,
                ..p
            };
            let bytes = serde_json::to_vec(&promoted).map_err(|e| SpoolError::Io {
                path: self.dir.join(name),
                source: io::Error::new(io::ErrorKind::InvalidData, e),
            })?;
            self.write(&final_name, &bytes)?;
        }
        self.remove(name)?;
        Ok(write)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POD: &str = "0d9f6a52-1111-2222-3333-444455556666";

    #[test]
    fn only_a_parse_failure_quarantines_a_read_error_leaves_the_file() {
        for errno in [libc::EIO, libc::EACCES, libc::ENOMEM, libc::EINTR] {
            let err = io::Error::from_raw_os_error(errno);
            let kind = err.kind();
            assert_eq!(
                at_open("coverage.json", || Err(err), POD),
                AtOpen::LeaveForLater(kind),
                "errno {errno}"
            );
        }
        let gone = || Err(io::Error::from(io::ErrorKind::NotFound));
        assert_eq!(at_open("coverage.json", gone, POD), AtOpen::Gone);
        assert_eq!(
            at_open("coverage.json", || Ok(b"{not json".to_vec()), POD),
            AtOpen::Quarantine
        );
        assert_eq!(at_open("x y.json", || unreachable!(), POD), AtOpen::Quarantine);
        assert_eq!(
            at_open("coverage.json.tmp", || unreachable!(), POD),
            AtOpen::RemoveTmp
        );
    }
}
