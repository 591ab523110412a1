//! Provider discovery (spec §Discovery, Known Defect 1), and the harness's
//! ([`find_harness`]: the launcher runs it, and hands it to a provider that
//! installs it where the agent runs).
//!
//! Search order (spec): the launcher executable's directory, every `PATH`
//! entry, `~/.local/bin`. `$BUZZ_PROVIDER_PATH` is an explicit override
//! searched before them; when it is set, `providers` and deploy diagnostics
//! say so ([`override_note`]). Files named
//! `buzz-backend-<id>` are candidates; the id is derived after stripping a
//! Windows `.exe`/`.bat`/`.cmd` suffix and must match `[a-z0-9][a-z0-9_-]*`.
//! The first valid hit per id wins; later valid hits are *shadowed*;
//! directories, non-executables and malformed names are *rejected* with a
//! reason. Discovery executes nothing.
//!
//! Not candidates at all (issue 24 item 5 "ignores build artifacts"):
//! build artifacts beside a binary ([`BUILD_ARTIFACT_SUFFIXES`]: cargo's
//! `buzz-backend-kubernetes.d`), and a file that is neither executable nor
//! named like a provider. A non-executable file with a provider's name
//! stays *rejected* ("is not executable": a missing `chmod +x`). Every
//! "not found" names the directories searched ([`Discovery::searched`]).

use crate::limits::{PROVIDER_PATH_ENV, PROVIDER_PREFIX, WINDOWS_SUFFIXES};
use std::collections::{BTreeMap, HashSet};
use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// True for a valid provider id: `[a-z0-9][a-z0-9_-]*`.
pub fn valid_id(id: &str) -> bool {
    let mut b = id.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_lowercase() || c.is_ascii_digit())
        && b.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-')
}

/// Why a name is not a usable provider id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameIssue {
    /// Not a provider file at all (no prefix).
    NotProvider,
    /// The id after prefix and suffix stripping is malformed.
    BadId(String),
}

/// Derives the id from a file name (pure): prefix required, Windows suffix stripped.
pub fn id_from_file_name(name: &str) -> Result<String, NameIssue> {
    let rest = name.strip_prefix(PROVIDER_PREFIX).ok_or(NameIssue::NotProvider)?;
    let lower = rest.to_ascii_lowercase();
    let stem = WINDOWS_SUFFIXES
        .iter()
        .find(|s| lower.ends_with(*s))
        .map_or(rest, |s| &rest[..rest.len() - s.len()]);
    if valid_id(stem) {
        Ok(stem.to_string())
    } else {
        Err(NameIssue::BadId(stem.to_string()))
    }
}

/// A candidate that lost to an earlier one with the same id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shadowed {
    pub id: String,
    pub path: PathBuf,
    pub by: PathBuf,
}

/// A candidate refused, with its reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub path: PathBuf,
    pub reason: String,
}

/// File name endings of build outputs that are never providers (cargo's
/// dep-info `.d`, libraries and debug files beside the binaries).
pub const BUILD_ARTIFACT_SUFFIXES: &[&str] = &[".d", ".rlib", ".rmeta", ".pdb", ".dwp"];

/// The discovery result with its diagnostics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Discovery {
    /// Selected binary per id.
    pub selected: BTreeMap<String, PathBuf>,
    pub shadowed: Vec<Shadowed>,
    pub rejected: Vec<Rejected>,
    /// The directories searched, in order.
    pub searched: Vec<PathBuf>,
}

/// Why a provider could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryError {
    #[error("`{0}` is not a valid provider id ([a-z0-9][a-z0-9_-]*)")]
    BadId(String),
    #[error(
        "no provider `buzz-backend-{id}` was found in {searched}{diag}; install it in one of these directories, or set BUZZ_PROVIDER_PATH to the directory that holds it"
    )]
    NotFound {
        id: String,
        /// [`Discovery::searched_list`].
        searched: String,
        diag: String,
    },
}

/// The search directories in order (pure over its inputs). Duplicates are dropped.
pub fn search_dirs(
    provider_path: Option<OsString>,
    exe_dir: Option<PathBuf>,
    path_var: Option<OsString>,
    home: Option<PathBuf>,
) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(p) = provider_path {
        dirs.extend(std::env::split_paths(&p));
    }
    dirs.extend(exe_dir);
    if let Some(p) = path_var {
        dirs.extend(std::env::split_paths(&p));
    }
    if let Some(h) = home {
        dirs.push(h.join(".local/bin"));
    }
    let mut seen = HashSet::new();
    dirs.into_iter()
        .filter(|d| !d.as_os_str().is_empty())
        .filter(|d| seen.insert(d.clone()))
        .collect()
}

/// The override directories (`$BUZZ_PROVIDER_PATH`), if any.
pub fn override_dirs_from_env() -> Vec<PathBuf> {
    std::env::var_os(PROVIDER_PATH_ENV)
        .map(|p| {
            std::env::split_paths(&p)
                .filter(|d| !d.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// The announcement of an active override, or `None` (pure).
pub fn override_note(overrides: &[PathBuf]) -> Option<String> {
    if overrides.is_empty() {
        return None;
    }
    let list: Vec<String> = overrides.iter().map(|d| d.display().to_string()).collect();
    Some(format!(
        "override: {PROVIDER_PATH_ENV}={} is searched before the launcher's directory, PATH and ~/.local/bin",
        list.join(":")
    ))
}

/// The search directories from this process's environment.
pub fn dirs_from_env() -> Vec<PathBuf> {
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf));
    search_dirs(
        std::env::var_os(PROVIDER_PATH_ENV),
        exe_dir,
        std::env::var_os("PATH"),
        std::env::var_os("HOME").map(PathBuf::from),
    )
}

/// Why a file cannot be executed, if it cannot.
fn unusable(path: &Path) -> Option<String> {
    match fs::metadata(path) {
        Err(e) => Some(format!("cannot be read ({e})")),
        Ok(m) if m.is_dir() => Some("is a directory".to_string()),
        Ok(m) if !m.is_file() => Some("is not a regular file".to_string()),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => Some("is not executable".to_string()),
        Ok(_) => None,
    }
}

/// Scans `dirs` in order. Executes nothing.
pub fn discover(dirs: &[PathBuf]) -> Discovery {
    let mut d = Discovery {
        searched: dirs.to_vec(),
        ..Discovery::default()
    };
    for dir in dirs {
        let Ok(entries) = fs::read_dir(dir) else { continue };
        let mut names: Vec<(String, PathBuf)> = Vec::new();
        for e in entries.filter_map(|e| e.ok()) {
            let raw = e.file_name();
            match raw.to_str() {
                Some(n) if BUILD_ARTIFACT_SUFFIXES.iter().any(|s| n.ends_with(s)) => {}
                Some(n) if n.starts_with(PROVIDER_PREFIX) => names.push((n.to_string(), e.path())),
                Some(_) => {}
                // A provider-looking name that is not UTF-8 cannot yield an id;
                // it is rejected with a reason, never silently skipped.
                None if raw.as_encoded_bytes().starts_with(PROVIDER_PREFIX.as_bytes()) => {
                    d.rejected.push(Rejected {
                        path: e.path(),
                        reason: "its name is not valid UTF-8".to_string(),
                    });
                }
                None => {}
            }
        }
        names.sort();
        for (name, path) in names {
            let id = match id_from_file_name(&name) {
                Ok(id) => id,
                // Neither named nor made like a provider: not a candidate.
                Err(NameIssue::BadId(_)) if unusable(&path).is_some() => continue,
                Err(NameIssue::BadId(bad)) => {
                    d.rejected.push(Rejected {
                        path,
                        reason: format!("its id {bad:?} does not match [a-z0-9][a-z0-9_-]*"),
                    });
                    continue;
                }
                Err(NameIssue::NotProvider) => continue,
            };
            if let Some(reason) = unusable(&path) {
                d.rejected.push(Rejected { path, reason });
                continue;
            }
            match d.selected.get(&id) {
                Some(winner) => d.shadowed.push(Shadowed {
                    id,
                    path,
                    by: winner.clone(),
                }),
                None => {
                    d.selected.insert(id, path);
                }
            }
        }
    }
    d
}

/// A resolved provider plus what the user should know about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    pub id: String,
    pub path: PathBuf,
    /// Set when the record's cached path was stale and discovery overrode it.
    pub cache_overridden: Option<PathBuf>,
}

impl Discovery {
    /// Resolves `id` against the *current* discovery set. A cached path is
    /// only a cache: it is used only when it is exactly the selected binary
    /// (spec §Discovery "Resolution rule").
    pub fn resolve(&self, id: &str, cached: Option<&Path>) -> Result<Resolution, DiscoveryError> {
        if !valid_id(id) {
            return Err(DiscoveryError::BadId(id.to_string()));
        }
        let path = self.selected.get(id).ok_or_else(|| DiscoveryError::NotFound {
            id: id.to_string(),
            searched: self.searched_list(),
            diag: {
                let s = self.diagnostics_for(id);
                if s.is_empty() {
                    String::new()
                } else {
                    format!("; {s}")
                }
            },
        })?;
        let cache_overridden = cached.filter(|c| *c != path.as_path()).map(Path::to_path_buf);
        Ok(Resolution {
            id: id.to_string(),
            path: path.clone(),
            cache_overridden,
        })
    }

    /// The directories searched, as a message names them.
    pub fn searched_list(&self) -> String {
        if self.searched.is_empty() {
            return "no directory (none of BUZZ_PROVIDER_PATH, the launcher's directory, PATH, ~/.local/bin is set)"
                .to_string();
        }
        let dirs: Vec<String> = self.searched.iter().map(|d| d.display().to_string()).collect();
        dirs.join(", ")
    }

    /// Diagnostics for one id: selected path, shadowed and rejected candidates.
    pub fn diagnostics_for(&self, id: &str) -> String {
        let mut parts = Vec::new();
        if let Some(p) = self.selected.get(id) {
            parts.push(format!("selected {}", p.display()));
        }
        for s in self.shadowed.iter().filter(|s| s.id == id) {
            parts.push(format!("shadowed {} (by {})", s.path.display(), s.by.display()));
        }
        for r in &self.rejected {
            let name = r
                .path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let matches_id = id_from_file_name(&name)
                .map(|i| i == id)
                .unwrap_or_else(|_| name.contains(id));
            if matches_id {
                parts.push(format!("rejected {} ({})", r.path.display(), r.reason));
            }
        }
        parts.join("; ")
    }
}

/// Looks for `name` on PATH.
pub fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The harness `demo`, a local start and a provider that installs it
/// (buzz-backend-ssh, handed it by the gate) use: `$BUZZ_ACP_BIN`, else
/// `buzz-acp` next to `own_exe`, else on PATH.
pub fn find_harness(own_exe: &Path) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(crate::limits::HARNESS_BIN_ENV).filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let beside = own_exe.parent().map(|d| d.join("buzz-acp"));
    beside.filter(|p| p.is_file()).or_else(|| on_path("buzz-acp"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_the_regex_and_windows_suffixes_are_stripped() {
        assert_eq!(
            id_from_file_name("buzz-backend-kubernetes"),
            Ok("kubernetes".into())
        );
        assert_eq!(
            id_from_file_name("buzz-backend-kubernetes.exe"),
            Ok("kubernetes".into())
        );
        assert_eq!(
            id_from_file_name("buzz-backend-k8s_x-1.CMD"),
            Ok("k8s_x-1".into())
        );
        assert_eq!(id_from_file_name("buzz-backend-x.bat"), Ok("x".into()));
        assert_eq!(
            id_from_file_name("buzz-backend-Bad"),
            Err(NameIssue::BadId("Bad".into()))
        );
        assert_eq!(
            id_from_file_name("buzz-backend-_x"),
            Err(NameIssue::BadId("_x".into()))
        );
        assert_eq!(
            id_from_file_name("buzz-backend-"),
            Err(NameIssue::BadId(String::new()))
        );
        assert_eq!(id_from_file_name("kubectl"), Err(NameIssue::NotProvider));
    }

    #[test]
    fn build_artifacts_and_non_executable_odd_names_are_not_candidates() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let put = |name: &str, mode: u32| {
            let p = dir.path().join(name);
            fs::write(&p, "#!/bin/sh\n").unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
            p
        };
        let good = put("buzz-backend-kubernetes", 0o755);
        put("buzz-backend-kubernetes.d", 0o644);
        put("buzz-backend-kubernetes.d.old", 0o644);
        put("buzz-backend-x.pdb", 0o755);
        let noexec = put("buzz-backend-plain", 0o644);
        let odd = put("buzz-backend-Odd", 0o755);
        let d = discover(&[dir.path().to_path_buf()]);
        assert_eq!(d.selected.get("kubernetes"), Some(&good));
        let rejected: Vec<&Path> = d.rejected.iter().map(|r| r.path.as_path()).collect();
        assert_eq!(rejected, [odd.as_path(), noexec.as_path()]);
        assert_eq!(d.rejected[1].reason, "is not executable");
        let e = d.resolve("nope", None).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "no provider `buzz-backend-nope` was found in {}; install it in one of these directories, or set BUZZ_PROVIDER_PATH to the directory that holds it",
                dir.path().display()
            )
        );
    }

    #[test]
    fn search_order_is_override_exe_path_local_bin_without_duplicates() {
        let dirs = search_dirs(
            Some("/t".into()),
            Some("/exe".into()),
            Some("/a:/b:/a:".into()),
            Some("/home/u".into()),
        );
        let want: Vec<PathBuf> = ["/t", "/exe", "/a", "/b", "/home/u/.local/bin"]
            .iter()
            .map(PathBuf::from)
            .collect();
        assert_eq!(dirs, want);
    }
}
