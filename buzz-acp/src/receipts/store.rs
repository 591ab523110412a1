//! The receipts on disk (issue 32 item 1): one file per conversation in
//! the agent's state directory ([`state_dir`]), mode 0600 in a 0700
//! directory, named by a digest of the conversation
//! ([`super::Conversation::file_name`]).
//!
//! - A save is atomic: a new file beside the old one (`O_EXCL`, 0600),
//!   synced, then renamed over it, and the directory synced. A reader sees
//!   the old receipt or the new one, never half of either.
//! - A file that is not a receipt of this conversation under this scope is
//!   never trusted: it is moved aside (`<name>.aside`, the last one kept,
//!   so they cannot pile up) with a log line that says why, naming the
//!   parts of the scope that differ and no value.
//! - A failed resume or load removes the receipt only if it still names
//!   the session that failed ([`Receipts::remove_if`]): a newer receipt,
//!   saved meanwhile by another slot, survives.
//!
//! - **Bounded** (review afa2bf1 finding 9): a save that leaves more than
//!   [`MAX_RECEIPTS`] receipts removes the least recently saved (by the
//!   `saved_at` they hold, else their file's mtime), never the one just
//!   saved; files moved aside are bounded apart by the same number, the
//!   oldest by mtime going first. Which go is decided by [`to_prune`], pure.
//!
//! The slots of one harness share one [`Receipts`]; its lock orders their
//! reads and writes. Two harnesses of the same agent key do not run at once
//! (spec I4).

use super::{Conversation, MacKey, Receipt, Scope, Verdict, judge, seal, unsealed};
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The most receipts one agent keeps, and apart from them the most files
/// moved aside (review afa2bf1 finding 9). A receipt is one conversation a
/// restart can bring back, and one is written per conversation: under
/// `anyone` every stranger's new channel is one more, so without a bound
/// the directory grows for as long as the workspace lives. 256 is four
/// slots' worth of live sessions ([`crate::acp::MAX_SESSIONS`]); the least
/// recently saved beyond it are the least likely to be asked again, and a
/// conversation whose receipt went is brought back from its history.
pub const MAX_RECEIPTS: usize = 256;

/// The env var that names the state directory.
pub const STATE_DIR_ENV: &str = "BUZZ_ACP_STATE_DIR";

/// The agent's state directory: `BUZZ_ACP_STATE_DIR`, else
/// `$XDG_STATE_HOME/buzz-acp/<agent pubkey>`, else
/// `$HOME/.local/state/buzz-acp/<agent pubkey>`. On Kubernetes HOME is the
/// workspace volume, so the receipts live and die with the workspace.
pub fn state_dir(agent_hex: &str, env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let set = |k: &str| env(k).filter(|v| !v.trim().is_empty()).map(PathBuf::from);
    if let Some(d) = set(STATE_DIR_ENV) {
        return Some(d);
    }
    let base = set("XDG_STATE_HOME").or_else(|| set("HOME").map(|h| h.join(".local").join("state")))?;
    Some(base.join("buzz-acp").join(agent_hex))
}

/// A receipt larger than this is not read to learn its `saved_at` (its
/// mtime stands in): a receipt is well under a kilobyte.
const READ_FOR_AGE_MAX: u64 = 64 * 1024;

/// What a file in the receipts' directory is, for the bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// `<digest>.json`.
    Receipt,
    /// `<digest>.json.aside`.
    Aside,
}

impl Held {
    /// What the file named `name` is; `None` for anything else (a save's
    /// temporary file), which the bound leaves alone.
    pub fn of(name: &str) -> Option<Held> {
        if name.ends_with(".json.aside") {
            Some(Held::Aside)
        } else if name.ends_with(".json") {
            Some(Held::Receipt)
        } else {
            None
        }
    }
}

/// One file the bound counts: its name, what it is, and its age, oldest
/// first when sorted (seconds: a receipt's `saved_at`, else the mtime;
/// then the mtime, to order one second's saves).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub name: String,
    pub held: Held,
    pub saved_at: u64,
    pub mtime: std::time::Duration,
}

/// The files to remove so that at most `max` of each kind stay: the oldest
/// of each kind beyond `max`, never `keep` (the receipt just saved).
pub fn to_prune(files: &[Listed], max: usize, keep: &str) -> Vec<String> {
    let mut out = Vec::new();
    for held in [Held::Receipt, Held::Aside] {
        let mut kind: Vec<&Listed> = files.iter().filter(|f| f.held == held).collect();
        let excess = kind.len().saturating_sub(max);
        kind.sort_by(|a, b| (a.saved_at, a.mtime, &a.name).cmp(&(b.saved_at, b.mtime, &b.name)));
        out.extend(
            kind.into_iter()
                .filter(|f| f.name != keep)
                .take(excess)
                .map(|f| f.name.clone()),
        );
    }
    out
}

/// Why the receipts could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ReceiptError {
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot encode a receipt: {0}")]
    Encode(#[from] serde_json::Error),
}

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> ReceiptError + 'a {
    move |source| ReceiptError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// The receipts of one agent (see the module doc).
#[derive(Debug)]
pub struct Receipts {
    dir: PathBuf,
    lock: Mutex<()>,
    key: MacKey,
}

impl Receipts {
    /// Opens (creating, 0700) `<state>/sessions`, sealing and checking
    /// with `key` (the agent's, [`MacKey::of_agent`]).
    pub fn open(state: &Path, key: MacKey) -> Result<Receipts, ReceiptError> {
        let dir = state.join("sessions");
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(io("create", &dir))?;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).map_err(io("chmod", &dir))?;
        Ok(Receipts {
            dir,
            lock: Mutex::new(()),
            key,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, conv: &Conversation) -> PathBuf {
        self.dir.join(conv.file_name())
    }

    fn guard(&self) -> std::sync::MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The receipt of `conv` under `scope` in `cwd`, if there is one to use.
    /// Any other file in its place is moved aside and logged.
    pub fn find(&self, conv: &Conversation, scope: &Scope, cwd: &Path) -> Option<Receipt> {
        let _g = self.guard();
        let path = self.path(conv);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read the conversation's receipt; starting a new session");
                return None;
            }
        };
        let why = match judge(&bytes, conv, scope, cwd, &self.key) {
            Verdict::Use(r) => return Some(*r),
            Verdict::Foreign(differs) => format!(
                "written under another scope (differs: {}); never used",
                differs.join(", ")
            ),
            Verdict::Corrupt(why) => why,
        };
        let aside = path.with_extension("json.aside");
        match fs::rename(&path, &aside) {
            Ok(()) => {
                tracing::warn!(path = %path.display(), aside = %aside.display(), "receipt moved aside: {why}")
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "receipt not used ({why}) and not moved aside")
            }
        }
        None
    }

    /// Saves `r` atomically (see the module doc).
    pub fn save(&self, r: &Receipt) -> Result<(), ReceiptError> {
        let conv = Conversation {
            channel: r.channel.clone(),
            owner: r.owner,
        };
        let bytes = seal(r, &self.key)?;
        let _g = self.guard();
        let path = self.path(&conv);
        let tmp = path.with_extension(format!("json.new-{}", std::process::id()));
        let _ = fs::remove_file(&tmp);
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io("create", &tmp))?;
        let written = f.write_all(&bytes).and_then(|()| f.sync_all());
        drop(f);
        if let Err(e) = written.map_err(io("write", &tmp)) {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        if let Err(e) = fs::rename(&tmp, &path).map_err(io("rename", &tmp)) {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        if let Err(e) = self.prune(&conv.file_name()) {
            tracing::warn!(error = %e, "cannot bound the conversations' receipts; the saved one is kept");
        }
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io("sync", &self.dir))
    }

    /// Lists the receipts and the files moved aside with their ages.
    fn listed(&self) -> Result<Vec<Listed>, ReceiptError> {
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(io("list", &self.dir))? {
            let entry = entry.map_err(io("list", &self.dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(held) = Held::of(&name) else {
                continue;
            };
            // Not followed: a link or a directory is the oldest of all.
            let meta = entry.metadata().ok();
            let mtime = meta
                .as_ref()
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .unwrap_or_default();
            let regular = meta.as_ref().is_some_and(|m| m.is_file());
            let small = meta.as_ref().is_some_and(|m| m.len() <= READ_FOR_AGE_MAX);
            let saved_at = match held {
                Held::Receipt if regular && small => fs::read(entry.path())
                    .ok()
                    .and_then(|b| unsealed(&b))
                    .map(|r| r.saved_at),
                _ => None,
            };
            let saved_at = match (saved_at, regular) {
                (Some(s), _) => s,
                (None, true) => mtime.as_secs(),
                (None, false) => 0,
            };
            out.push(Listed {
                name,
                held,
                saved_at,
                mtime,
            });
        }
        Ok(out)
    }

    /// Removes what [`to_prune`] says, once `keep` was saved.
    fn prune(&self, keep: &str) -> Result<(), ReceiptError> {
        let listed = self.listed()?;
        for name in to_prune(&listed, MAX_RECEIPTS, keep) {
            let path = self.dir.join(&name);
            match fs::remove_file(&path) {
                Ok(()) => {
                    tracing::info!(path = %path.display(), "receipt removed: the agent keeps {MAX_RECEIPTS}, the least recently saved go")
                }
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(io("remove", &path)(e)),
            }
        }
        Ok(())
    }

    /// Removes `conv`'s receipt if it still names `session_id`; whether it did.
    pub fn remove_if(&self, conv: &Conversation, session_id: &str) -> Result<bool, ReceiptError> {
        let _g = self.guard();
        let path = self.path(conv);
        let current = match fs::read(&path) {
            Ok(b) => unsealed(&b),
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io("read", &path)(e)),
        };
        if current.is_some_and(|r| r.session_id == session_id) {
            fs::remove_file(&path).map_err(io("remove", &path))?;
            return Ok(true);
        }
        Ok(false)
    }
}
