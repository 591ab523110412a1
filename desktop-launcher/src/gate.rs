//! The pre-secret negotiation gate (spec §Discovery "Pre-secret negotiation
//! gate", §`info`, Known Defect 5).
//!
//! resolve once → copy into a sealed in-memory file and hash the sealed
//! bytes ([`crate::stage`]) → `info` executed from that file → explicit
//! supported `protocol_version` → `deploy` executed from the same file → drop
//! it. The nsec goes to the exact bytes that answered `info` and whose digest
//! is printed: neither a rewrite or swap of the discovered path nor a
//! provider replacing its own staged copy during `info` can redirect it (the
//! seals make the copy immutable; see [`crate::stage`] for the threat model).
//! No metadata fallback. Opt-in strict mode refuses a digest not recorded by
//! `providers approve`.
//!
//! `undeploy` (issue 21) passes the same gate — stage, digest, strict mode,
//! `info`, version — and is invoked on the same sealed copy only when that
//! `info` advertises it ([`buzz_contract::wire::info_supports`]). Its request
//! carries the pubkey and `provider_config`, never a secret; its answer is
//! held to the strict rules plus [`response::parse_removed`].
//!
//! Everything the provider prints is redacted before any display or storage
//! ([`crate::redact`]) and stripped of terminal controls
//! ([`crate::response::sanitize_line`]).

use crate::discovery::Resolution;
use crate::invoke::{self, Limits};
use crate::limits::{DEPLOY_KILL_DEADLINE, INFO_DEADLINE};
use crate::payload::PayloadError;
use crate::redact::Redactor;
use crate::response::{self, VersionIssue};
pub use crate::stage::{StageError, Staged, stage};
use buzz_contract::wire::{DeployRequest, OP_UNDEPLOY, Removed, UndeployRequest, info_supports};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why the gate refused or a provider operation failed. Every message names
/// the binary (path and digest); provider text in it is already redacted.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error("cannot stage provider {path}: {source}; no secret was sent")]
    Stage { path: PathBuf, source: StageError },
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
    /// Its `info` does not list `undeploy` in `operations`: nothing was invoked after `info`.
    #[error(
        "provider `{id}` at {path} (sha256 {digest}) does not offer `undeploy` (its `info` lists no such operation)"
    )]
    UndeployUnsupported {
        id: String,
        path: PathBuf,
        digest: String,
    },
    #[error("cannot build the undeploy request: {0}")]
    UndeployPayload(PayloadError),
    #[error("provider {path} (sha256 {digest}) failed `undeploy`: {reason}")]
    Undeploy {
        path: PathBuf,
        digest: String,
        reason: String,
    },
}

/// Gate settings.
#[derive(Debug, Clone)]
pub struct GateConfig {
    pub info_deadline: Duration,
    /// When the launcher kills `deploy`: the spec's 600 s plus a grace
    /// margin, so the provider's own in-band error always arrives first
    /// (see [`crate::limits::DEPLOY_KILL_DEADLINE`]).
    pub deploy_deadline: Duration,
    /// When the launcher kills `undeploy` (see [`crate::limits::UNDEPLOY_KILL_DEADLINE`]).
    pub undeploy_deadline: Duration,
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
            deploy_deadline: DEPLOY_KILL_DEADLINE,
            undeploy_deadline: crate::limits::UNDEPLOY_KILL_DEADLINE,
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
    let text = response::sanitize_text(&redactor.scrub(&response::lossy(stderr)));
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
    let mut status = |line: &str| on_status(&response::sanitize_line(&redactor.scrub(line)));
    let mut cmd = staged.command();
    // A provider that installs the harness where the agent runs
    // (buzz-backend-ssh, issue 51) is handed the one this launcher runs
    // itself: the staged provider has no directory of its own to look in.
    if let Some(h) = std::env::current_exe()
        .ok()
        .and_then(|exe| crate::discovery::find_harness(&exe))
    {
        cmd.env(crate::limits::HARNESS_BIN_ENV, h);
    }
    let out = invoke::run_command(cmd, cwd, request, limits, &mut status).map_err(|e| e.to_string())?;
    let unread = out.stdin_unread.map(|kind| {
        format!(
            "it did not read its whole request (writing its stdin failed: {})",
            std::io::Error::from(kind)
        )
    });
    if !out.status.success() {
        let tail = stderr_tail(redactor, &out.stderr);
        let code = out
            .status
            .code()
            .map_or_else(|| "a signal".to_string(), |c| format!("status {c}"));
        let mut msg = format!("it exited with {code} (a non-zero exit is failure whatever stdout says)");
        if let Some(u) = &unread {
            msg.push_str("; ");
            msg.push_str(u);
        }
        if !tail.is_empty() {
            msg.push_str("; stderr: ");
            msg.push_str(&tail);
        }
        return Err(msg);
    }
    if let Some(u) = unread {
        // Whatever it answered, it answered without the request.
        return Err(u);
    }
    match response::parse_response(&out.stdout) {
        Ok(Ok(map)) => Ok(map),
        Ok(Err(msg)) => Err(format!(
            "it answered ok:false: {}",
            response::sanitize_line(&response::truncate_chars(&redactor.scrub(&msg), 2000))
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// What `info` answered, from which binary.
#[derive(Debug, Clone)]
pub struct InfoOutcome {
    /// The discovered path.
    pub path: PathBuf,
    /// SHA-256 of the sealed copy that answered.
    pub sha256: String,
    /// The `info` response (its `config_schema` drives the form).
    pub info: Map<String, Value>,
}

/// The first half of the gate alone: stage → (strict check) → `info` →
/// version. What the Start page runs to render a provider's `config_schema`
/// (spec §`info`); no secret is involved.
pub fn info(
    resolution: &Resolution,
    staging_root: &Path,
    workdir: &Path,
    cfg: &GateConfig,
    on_status: &mut dyn FnMut(&str),
) -> Result<InfoOutcome, GateError> {
    let (staged, info) = staged_info(resolution, staging_root, workdir, cfg, on_status)?;
    Ok(InfoOutcome {
        path: resolution.path.clone(),
        sha256: staged.sha256.clone(),
        info,
    })
}

/// Stages the binary, applies strict mode, runs `info` from the sealed copy
/// and checks its protocol version; the staged copy is returned for `deploy`.
fn staged_info(
    resolution: &Resolution,
    staging_root: &Path,
    workdir: &Path,
    cfg: &GateConfig,
    on_status: &mut dyn FnMut(&str),
) -> Result<(Staged, Map<String, Value>), GateError> {
    crate::stage::collect_leftovers(staging_root, DEPLOY_KILL_DEADLINE);
    let staged = stage(&resolution.path).map_err(|source| GateError::Stage {
        path: resolution.path.clone(),
        source,
    })?;
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
    Ok((staged, info))
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
    let negotiated = negotiate(resolution, staging_root, workdir, cfg, on_status)?;
    let req = build(negotiated.info())?;
    negotiated.deploy(&req, cfg, on_status)
}

/// A provider that passed the first half of the gate: its sealed staged copy
/// and what that copy answered to `info`. Every `deploy` of one Start goes
/// to this one copy, so a Start that deploys again (a restart waiting for
/// the node, [`crate::restart`]) stages and asks `info` once, and the nsec
/// only ever reaches the bytes that answered it. Dropping it drops the copy.
pub struct Negotiated {
    staged: Staged,
    info: Map<String, Value>,
    path: PathBuf,
    workdir: PathBuf,
}

/// Stage → (strict check) → `info` → version, kept for one or more deploys.
pub fn negotiate(
    resolution: &Resolution,
    staging_root: &Path,
    workdir: &Path,
    cfg: &GateConfig,
    on_status: &mut dyn FnMut(&str),
) -> Result<Negotiated, GateError> {
    let (staged, info) = staged_info(resolution, staging_root, workdir, cfg, on_status)?;
    Ok(Negotiated {
        staged,
        info,
        path: resolution.path.clone(),
        workdir: workdir.to_path_buf(),
    })
}

impl Negotiated {
    /// The `info` response (for `config_schema`).
    pub fn info(&self) -> &Map<String, Value> {
        &self.info
    }

    /// `deploy` from the staged copy, under the strict response rules.
    pub fn deploy(
        &self,
        req: &DeployRequest,
        cfg: &GateConfig,
        on_status: &mut dyn FnMut(&str),
    ) -> Result<Deployed, GateError> {
        let path = self.path.clone();
        let digest = self.staged.sha256.clone();
        let redactor = Redactor::for_request(req);
        let fail = |reason: String| GateError::Deploy {
            path: path.clone(),
            digest: digest.clone(),
            reason,
        };
        let body = serde_json::to_vec(req).map_err(|e| fail(format!("cannot serialize the request: {e}")))?;
        let mut limits = Limits::with_deadline(cfg.deploy_deadline);
        limits.drain_grace = cfg.drain_grace;
        let resp = call(&self.staged, &self.workdir, &body, limits, &redactor, on_status);
        drop(body);
        let resp = resp.map_err(fail)?;
        let agent_id = match resp.get("agent_id") {
            Some(Value::String(s)) if !s.trim().is_empty() => {
                response::sanitize_agent_id(&redactor.scrub_handle(s.trim()))
            }
            _ => return Err(fail("its response has no agent_id string".to_string())),
        };
        let generation = resp
            .get("generation")
            .and_then(Value::as_str)
            .filter(|g| buzz_contract::keys::is_hex32_lower(g))
            .map(str::to_string);
        Ok(Deployed {
            agent_id,
            generation,
            path,
            sha256: digest,
            info: self.info.clone(),
        })
    }
}

/// A successful `undeploy`.
#[derive(Debug, Clone)]
pub struct Undeployed {
    /// What the provider says it removed.
    pub removed: Removed,
    /// The workspace volumes it kept, by name (`keep_workspace`).
    pub kept: Vec<String>,
    /// The binary that ran: discovered path and staged digest.
    pub path: PathBuf,
    pub sha256: String,
}

/// The gate for `undeploy`: stage → (strict check) → `info` → version →
/// advertised? → build → `undeploy` on the same sealed copy → delete.
///
/// `build` receives the `info` response and is called only once `info`
/// advertised `undeploy`. `redactor` scrubs the answer: the launcher sends
/// no secret, but a provider that held the agent's during `deploy` may echo
/// them, so the caller passes the state dir's ([`crate::store::Store::secrets`]).
pub fn undeploy(
    resolution: &Resolution,
    staging_root: &Path,
    workdir: &Path,
    cfg: &GateConfig,
    redactor: &Redactor,
    build: impl FnOnce(&Map<String, Value>) -> Result<UndeployRequest, PayloadError>,
    on_status: &mut dyn FnMut(&str),
) -> Result<Undeployed, GateError> {
    let (staged, info) = staged_info(resolution, staging_root, workdir, cfg, on_status)?;
    let path = resolution.path.clone();
    let digest = staged.sha256.clone();
    if !info_supports(&info, OP_UNDEPLOY) {
        return Err(GateError::UndeployUnsupported {
            id: resolution.id.clone(),
            path,
            digest,
        });
    }
    let req = build(&info).map_err(GateError::UndeployPayload)?;
    let fail = |reason: String| GateError::Undeploy {
        path: path.clone(),
        digest: digest.clone(),
        reason,
    };
    let body = serde_json::to_vec(&req).map_err(|e| fail(format!("cannot serialize the request: {e}")))?;
    let mut limits = Limits::with_deadline(cfg.undeploy_deadline);
    limits.drain_grace = cfg.drain_grace;
    let resp = call(&staged, workdir, &body, limits, redactor, on_status).map_err(fail)?;
    let removed = response::parse_removed(&resp).map_err(|e| fail(e.to_string()))?;
    let kept = response::parse_kept(&resp).map_err(|e| fail(e.to_string()))?;
    drop(staged);
    Ok(Undeployed {
        removed,
        kept,
        path,
        sha256: digest,
    })
}
