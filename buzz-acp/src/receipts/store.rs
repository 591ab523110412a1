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
//! The slots of one harness share one [`Receipts`]; its lock orders their
//! reads and writes. Two harnesses of the same agent key do not run at once
//! (spec I4).

use super::{Conversation, MacKey, Receipt, Scope, Verdict, judge, seal, unsealed};
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

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
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io("sync", &self.dir))
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
