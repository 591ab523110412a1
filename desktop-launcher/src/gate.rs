//! The pre-secret negotiation gate (spec §Discovery "Pre-secret negotiation
//! gate", §`info`, Known Defect 5).
//!
//! resolve once → copy into a private staging dir (`0700`, file `0500`),
//! SHA-256 during the copy → `info` on the staged file → explicit supported
//! `protocol_version` → `deploy` on the same staged file → delete it. The nsec
//! goes to the exact bytes that answered `info`; a rewrite or swap of the
//! discovered path after resolution cannot redirect it. No metadata fallback.
//! Opt-in strict mode refuses a digest not recorded by `providers approve`.

use crate::discovery::Resolution;
use crate::invoke::{self, Limits};
use crate::limits::{DEPLOY_DEADLINE, INFO_DEADLINE};
use crate::payload::PayloadError;
use crate::redact::Redactor;
use crate::response::{self, VersionIssue};
use buzz_contract::wire::DeployRequest;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A staged copy of a provider binary; the directory is removed on drop.
#[derive(Debug)]
pub struct Staged {
    dir: PathBuf,
    /// The staged executable.
    pub file: PathBuf,
    /// SHA-256 of the staged bytes, lowercase hex.
    pub sha256: String,
    /// Where it was copied from.
    pub source: PathBuf,
}

impl Drop for Staged {
    fn drop(&mut self) {
        let _ = fs::set_permissions(&self.file, fs::Permissions::from_mode(0o700));
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Why the gate refused or a provider operation failed. Every message names
/// the binary (path and digest); provider text in it is already redacted.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error("cannot stage provider {path}: {source}")]
    Stage { path: PathBuf, source: std::io::Error },
    #[error(
        "provider `{id}` at {path} (sha256 {digest}) is not approved; strict mode is on — run `buzz-launcher providers approve {id}` if you trust it"
    )]
    NotApproved {
        id: String,
        path: PathBuf,
        digest: String,
    },
    #[error("provider {path} (sha256 {digest}) failed `info`: {reason}; no secret was sent")]
    Info {
        path: PathBuf,
        digest: String,
        reason: String,
    },
    #[error("provider {path} (sha256 {digest}) {issue}; no secret was sent")]
    Version {
        path: PathBuf,
        digest: String,
        issue: VersionIssue,
    },
    #[error("cannot build the deploy request: {0}; no secret was sent")]
    Payload(#[from] PayloadError),
    #[error("provider {path} (sha256 {digest}) failed `deploy`: {reason}")]
    Deploy {
        path: PathBuf,
        digest: String,
        reason: String,
    },
}

/// Copies `source` into a fresh private dir under `staging_root`, hashing as it copies.
pub fn stage(source: &Path, staging_root: &Path) -> Result<Staged, GateError> {
    let err = |e: std::io::Error| GateError::Stage {
        path: source.to_path_buf(),
        source: e,
    };
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(staging_root)
        .map_err(err)?;
    let dir = staging_root.join(hex::encode(rand::random::<[u8; 12]>()));
    fs::DirBuilder::new().mode(0o700).create(&dir).map_err(err)?;
    let name = source
        .file_name()
        .map_or_else(|| "provider".into(), |n| n.to_os_string());
    let file = dir.join(name);
    let mut staged = Staged {
        dir,
        file: file.clone(),
        sha256: String::new(),
        source: source.to_path_buf(),
    };
    // One open of the source: what we hash is what we copy.
    let mut src = fs::File::open(source).map_err(err)?;
    let meta = src.metadata().map_err(err)?;
    if !meta.is_file() {
        return Err(err(std::io::Error::other("not a regular file")));
    }
    let mut dst = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o700)
        .open(&file)
        .map_err(err)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = src.read(&mut buf).map_err(err)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        dst.write_all(&buf[..n]).map_err(err)?;
    }
    dst.flush().map_err(err)?;
    drop(dst);
    fs::set_permissions(&file, fs::Permissions::from_mode(0o500)).map_err(err)?;
    staged.sha256 = hex::encode(hasher.finalize());
    Ok(staged)
}

/// Gate settings.
#[derive(Debug, Clone)]
pub struct GateConfig {
    pub info_deadline: Duration,
    pub deploy_deadline: Duration,
    /// Pipe grace after exit (see [`invoke::Limits::drain_grace`]).
    pub drain_grace: Duration,
    /// Refuse digests not in `approvals`.
    pub strict: bool,
    /// id → approved sha256.
    pub approvals: BTreeMap<String, String>,
}

impl Default for GateConfig {
    fn default() -> Self {
        GateConfig {
            info_deadline: INFO_DEADLINE,
            deploy_deadline: DEPLOY_DEADLINE,
            drain_grace: crate::limits::PIPE_DRAIN_GRACE,
            strict: false,
            approvals: BTreeMap::new(),
        }
    }
}

/// A successful deploy.
#[derive(Debug, Clone)]
pub struct Deployed {
    pub agent_id: String,
    /// The provider's generation token, if it reported a 32-hex one.
    pub generation: Option<String>,
    /// The binary that ran: discovered path and staged digest.
    pub path: PathBuf,
    pub sha256: String,
    /// The provider's `info` response (redacted-safe: no secrets were sent yet).
    pub info: Map<String, Value>,
}

fn stderr_tail(redactor: &Redactor, stderr: &[u8]) -> String {
    let text = redactor.scrub(&response::lossy(stderr));
    let trimmed = text.trim();
    let chars = trimmed.chars().count();
    let tail: String = trimmed.chars().skip(chars.saturating_sub(2000)).collect();
    tail
}

/// Runs one operation on the staged file and applies the strict response rules.
fn call(
    staged: &Staged,
    cwd: &Path,
    request: &[u8],
    limits: Limits,
    redactor: &Redactor,
    on_status: &mut dyn FnMut(&str),
) -> Result<Map<String, Value>, String> {
    let mut status = |line: &str| on_status(&redactor.scrub(line));
    let out = invoke::run(&staged.file, cwd, request, limits, &mut status).map_err(|e| e.to_string())?;
    if !out.status.success() {
        let tail = stderr_tail(redactor, &out.stderr);
        let code = out
            .status
            .code()
            .map_or_else(|| "a signal".to_string(), |c| format!("status {c}"));
        return Err(if tail.is_empty() {
            format!("it exited with {code} (a non-zero exit is failure whatever stdout says)")
        } else {
            format!("it exited with {code} (a non-zero exit is failure whatever stdout says); stderr: {tail}")
        });
    }
    match response::parse_response(&out.stdout) {
        Ok(Ok(map)) => Ok(map),
        Ok(Err(msg)) => Err(format!(
            "it answered ok:false: {}",
            response::truncate_chars(&redactor.scrub(&msg), 2000)
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// The whole gate: stage → (strict check) → `info` → version → build → `deploy` → delete.
///
/// `build` receives the `info` response (for `config_schema`) and returns the
/// deploy request; it is called only after the version check passed.
pub fn deploy(
    resolution: &Resolution,
    staging_root: &Path,
    workdir: &Path,
    cfg: &GateConfig,
    build: impl FnOnce(&Map<String, Value>) -> Result<DeployRequest, PayloadError>,
    on_status: &mut dyn FnMut(&str),
) -> Result<Deployed, GateError> {
    let staged = stage(&resolution.path, staging_root)?;
    let path = resolution.path.clone();
    let digest = staged.sha256.clone();
    if cfg.strict && cfg.approvals.get(&resolution.id) != Some(&digest) {
        return Err(GateError::NotApproved {
            id: resolution.id.clone(),
            path,
            digest,
        });
    }
    let request_id = hex::encode(rand::random::<[u8; 16]>());
    let info_req = serde_json::to_vec(&crate::payload::info_request(&request_id)).unwrap_or_default();
    let mut limits = Limits::with_deadline(cfg.info_deadline);
    limits.drain_grace = cfg.drain_grace;
    let token_only = Redactor::default();
    let info = call(&staged, workdir, &info_req, limits, &token_only, on_status).map_err(|reason| {
        GateError::Info {
            path: path.clone(),
            digest: digest.clone(),
            reason,
        }
    })?;
    response::check_protocol_version(&info).map_err(|issue| GateError::Version {
        path: path.clone(),
        digest: digest.clone(),
        issue,
    })?;
    let req = build(&info)?;
    let redactor = Redactor::for_request(&req);
    let body = serde_json::to_vec(&req).map_err(|e| GateError::Deploy {
        path: path.clone(),
        digest: digest.clone(),
        reason: format!("cannot serialize the request: {e}"),
    })?;
    let mut limits = Limits::with_deadline(cfg.deploy_deadline);
    limits.drain_grace = cfg.drain_grace;
    let resp = call(&staged, workdir, &body, limits, &redactor, on_status);
    drop(body);
    let resp = resp.map_err(|reason| GateError::Deploy {
        path: path.clone(),
        digest: digest.clone(),
        reason,
    })?;
    let agent_id = match resp.get("agent_id") {
        Some(Value::String(s)) if !s.trim().is_empty() => redactor.scrub_handle(s.trim()),
        _ => {
            return Err(GateError::Deploy {
                path,
                digest,
                reason: "its response has no agent_id string".to_string(),
            });
        }
    };
    let generation = resp
        .get("generation")
        .and_then(Value::as_str)
        .filter(|g| buzz_contract::keys::is_hex32_lower(g))
        .map(str::to_string);
    drop(staged);
    Ok(Deployed {
        agent_id,
        generation,
        path,
        sha256: digest,
        info,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_copies_hashes_and_locks_down_then_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("buzz-backend-x");
        fs::write(&src, b"#!/bin/sh\necho hi\n").unwrap();
        let root = dir.path().join("staging");
        let staged = stage(&src, &root).unwrap();
        assert_eq!(
            staged.sha256,
            hex::encode(Sha256::digest(b"#!/bin/sh\necho hi\n"))
        );
        let fmode = fs::metadata(&staged.file).unwrap().permissions().mode() & 0o777;
        let dmode = fs::metadata(staged.file.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!((fmode, dmode), (0o500, 0o700));
        // The staged bytes are independent of later rewrites of the source.
        fs::write(&src, b"changed").unwrap();
        assert_eq!(fs::read(&staged.file).unwrap(), b"#!/bin/sh\necho hi\n");
        let parent = staged.file.parent().unwrap().to_path_buf();
        drop(staged);
        assert!(!parent.exists());
    }

    #[test]
    fn staging_refuses_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let e = stage(dir.path(), &dir.path().join("s")).unwrap_err();
        assert!(matches!(e, GateError::Stage { .. }));
    }
}
