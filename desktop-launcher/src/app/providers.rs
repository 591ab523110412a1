//! `providers`: what discovery found, approving a binary for strict mode,
//! and a provider's `info` through the gate (spec §Discovery, §Provider
//! Protocol `info`; Known Defect 5). The CLI's `providers` and the Start
//! page's provider list, approve button and config form all call these, so
//! the two cannot list, hash or approve differently.
//!
//! Every digest here is of the sealed copy the gate would execute
//! ([`crate::gate::stage`]), never of the path on disk, so the digest an
//! owner approves is the one a Start checks.

use super::agent::StartOptions;
use super::error::AppError;
use crate::discovery::{self, Rejected, Resolution, Shadowed};
use crate::gate::{self, GateError, InfoOutcome};
use crate::record::AgentRecord;
use crate::store::{Store, StoreError};
use std::path::{Path, PathBuf};

/// One selected provider: the path discovery chose for its id, the digest
/// of its sealed copy (or why it could not be sealed), whether strict mode
/// would run it, and discovery's words about it.
#[derive(Debug, Clone)]
pub struct Provider {
    pub id: String,
    pub path: PathBuf,
    pub sha256: Option<String>,
    pub stage_error: Option<String>,
    /// The recorded approval matches `sha256`.
    pub approved: bool,
    pub diagnostics: String,
}

/// The providers found, with what was passed over and where discovery looked.
#[derive(Debug, Clone)]
pub struct Providers {
    pub providers: Vec<Provider>,
    pub shadowed: Vec<Shadowed>,
    pub rejected: Vec<Rejected>,
    /// Strict mode is on (only approved digests run).
    pub strict: bool,
    /// Said when `BUZZ_PROVIDER_PATH` replaces the default search path.
    pub override_note: Option<String>,
    /// The directories searched, as one line (for "no providers found").
    pub searched: String,
}

/// Discovers the providers and seals each selected binary once to hash it.
pub fn list(store: &Store) -> Result<Providers, AppError> {
    let opts = StartOptions::from_env(store)?;
    let d = discovery::discover(&opts.dirs);
    let providers = d
        .selected
        .iter()
        .map(|(id, path)| {
            let (sha256, stage_error) = match gate::stage(path) {
                Ok(st) => (Some(st.sha256.clone()), None),
                Err(e) => (None, Some(e.to_string())),
            };
            let approved = sha256.is_some() && opts.gate.approvals.get(id) == sha256.as_ref();
            Provider {
                id: id.clone(),
                path: path.clone(),
                approved,
                diagnostics: d.diagnostics_for(id),
                sha256,
                stage_error,
            }
        })
        .collect();
    Ok(Providers {
        providers,
        strict: opts.gate.strict,
        override_note: discovery::override_note(&discovery::override_dirs_from_env()),
        searched: d.searched_list(),
        shadowed: d.shadowed,
        rejected: d.rejected,
    })
}

/// An approval just recorded.
#[derive(Debug, Clone)]
pub struct Approved {
    pub id: String,
    pub path: PathBuf,
    pub sha256: String,
}

/// Records the digest of `id`'s sealed copy as approved (strict mode).
pub fn approve(store: &Store, id: &str) -> Result<Approved, AppError> {
    let res = discovery::discover(&discovery::dirs_from_env()).resolve(id, None)?;
    let staged = gate::stage(&res.path).map_err(|source| GateError::Stage {
        path: res.path.clone(),
        source,
    })?;
    store.approve(id, &staged.sha256)?;
    Ok(Approved {
        id: id.to_string(),
        path: res.path,
        sha256: staged.sha256.clone(),
    })
}

/// `info` of provider `id` through the gate (sealed copy, strict mode
/// honoured). It runs in `agent`'s workdir, or in a private scratch dir of
/// the state dir for a form that has no agent yet.
pub fn info(store: &Store, id: &str, agent: Option<&str>) -> Result<InfoOutcome, AppError> {
    let opts = StartOptions::from_env(store)?;
    let res = discovery::discover(&opts.dirs).resolve(id, None)?;
    let wd = match agent.map(|n| store.agent(n)).transpose()? {
        Some(AgentRecord { workdir: Some(w), .. }) => w,
        Some(rec) => store.default_workdir(&rec.name)?,
        None => {
            let dir = store.root().join("work").join(".ui-info");
            std::fs::create_dir_all(&dir).map_err(|source| StoreError::Io {
                action: "create",
                path: dir.clone(),
                source,
            })?;
            dir
        }
    };
    info_at(store, &res, &wd, &opts)
}

/// `info` of a resolved provider through the gate, run in `workdir` (the
/// config form's schema, and whether a provider offers `undeploy`).
pub(super) fn info_at(
    store: &Store,
    res: &Resolution,
    workdir: &Path,
    opts: &StartOptions,
) -> Result<InfoOutcome, AppError> {
    Ok(gate::info(
        res,
        &store.staging_root(),
        workdir,
        &opts.gate,
        &mut |_| {},
    )?)
}
